"""A Griffe extension for the API reference (mkdocs.yml): private names stay out of it.

conveyor's ``__all__`` lists a few of torch's private names on purpose (``_DatasetKind``: code
written for ``torch.utils.data`` imports it), and `__all__` makes a name public to
mkdocstrings. The reference is for users: a module member whose name starts with one
underscore is marked private here, whatever ``__all__`` says.
"""

from __future__ import annotations

from typing import Any

import griffe


class PrivateNames(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        pending = [pkg]
        while pending:
            module = pending.pop()
            for name, member in module.members.items():
                if name.startswith("_") and not name.startswith("__"):
                    member.public = False
                elif not member.is_alias and member.is_module:
                    pending.append(member)
