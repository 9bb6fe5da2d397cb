"""Names a package exports but imports on first use (PEP 562), one implementation for all.

``import conveyor`` stays cheap (S4) because its packages hand out most names lazily: each
package lists ``name -> module`` and takes its ``__getattr__``/``__dir__`` from here.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    table: Mapping[str, str],
    namespace: dict[str, Any],
    exports: Iterable[str],
    *,
    submodules: bool = False,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: The package's ``__name__``.
        table: Exported name -> the module that defines it. A name that is the module's own
            last part (``"iter": "conveyor.datapipes.iter"``) is the module itself.
        namespace: The package's ``globals()``: a name, once imported, is kept there, so
            later lookups are ordinary attribute reads.
        exports: The package's ``__all__`` (what ``dir()`` lists besides its globals).
        submodules: Also hand out submodules not imported yet (``conveyor.datapipes`` after
            a plain ``import conveyor``, as torch's eagerly imported submodules allow).
    """
    listed = sorted(set(exports))

    def __getattr__(name: str) -> Any:
        module_name = table.get(name)
        if module_name is not None:
            module = importlib.import_module(module_name)
            value = module if module_name == f"{package}.{name}" else getattr(module, name)
            namespace[name] = value
            return value
        submodule = f"{package}.{name}"
        if submodules and not name.startswith("__") and importlib.util.find_spec(submodule):
            return importlib.import_module(submodule)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(listed))

    return __getattr__, __dir__
