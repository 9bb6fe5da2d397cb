"""A tqdm progress bar that also says whether the loader keeps up."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol


class _StatsSource(Protocol):
    def __iter__(self) -> Iterator[Any]: ...

    def stats(self) -> Any: ...


def progress(loader: _StatsSource, every: int = 10, **tqdm_kwargs: Any) -> Iterator[Any]:
    """Iterate ``loader`` under a tqdm bar showing samples/s and the data-wait share.

    ``every`` batches the postfix is refreshed from ``loader.stats()``; other keyword
    arguments go to ``tqdm`` (``desc``, ``total``, ...). Needs the ``progress`` extra.
    """
    try:
        from tqdm import tqdm
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "conveyor.stats.progress needs tqdm: pip install 'conveyor[progress]'"
        ) from error
    if "total" not in tqdm_kwargs:
        with contextlib.suppress(TypeError):  # a stream without a length: no total
            tqdm_kwargs["total"] = len(loader)  # type: ignore[arg-type]
    with tqdm(**tqdm_kwargs) as bar:
        for count, batch in enumerate(loader, 1):
            yield batch
            bar.update(1)
            if count % every == 0:
                stats = loader.stats()
                bar.set_postfix(
                    samples_s=f"{stats.samples_per_s:,.0f}",
                    data_wait=f"{stats.wait_share:.0%}",
                    refresh=False,
                )
