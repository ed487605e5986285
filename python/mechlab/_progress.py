"""Progress bars for long calls: a tqdm bar when tqdm is installed, else none."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional

Callback = Callable[[int, int], None]


@contextmanager
def bar(quiet: bool, desc: str, unit: str) -> Iterator[Optional[Callback]]:
    """Yields the ``on_progress(done, total)`` callback the native job calls from
    the calling thread (``None`` when quiet or without tqdm); closes the bar after."""
    if quiet:
        yield None
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        yield None
        return
    b = tqdm(total=None, desc=desc, unit=unit, dynamic_ncols=True)

    def update(done: int, total: int) -> None:
        if total and b.total != total:
            b.total = total
        b.n = done
        b.refresh()

    try:
        yield update
    finally:
        b.close()
