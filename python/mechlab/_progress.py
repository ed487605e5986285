"""Progress bars for long calls: a tqdm bar when tqdm is installed, else none.

``tqdm.auto`` draws a widget in Jupyter when ``ipywidgets`` is installed (the
``[notebook]`` extra brings it) and a text bar elsewhere. A run's bar names its
phase (data and model, training, probes and verdicts, figures and report), so
the seconds before and after training are not a bar stuck at 0 or 100 %.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

Callback = Callable[[int, int, str], None]


def interactive() -> bool:
    """Whether someone is watching: a notebook kernel, or a terminal on stderr
    (the CLI's rule: bars on a terminal, none in logs and pipes)."""
    if "ipykernel" in sys.modules:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def bar(quiet: Optional[bool], desc: str, unit: str, phases: bool = False) -> Iterator[Optional[Callback]]:
    """Yields the ``on_progress(done, total, phase)`` callback the native job
    calls from the calling thread (``None`` when quiet or without tqdm); closes
    the bar after. ``quiet=None`` shows the bar only when :func:`interactive`;
    ``phases`` writes the run's phase after ``desc``."""
    if quiet or (quiet is None and not interactive()):
        yield None
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        yield None
        return
    b = tqdm(total=None, desc=desc, unit=unit, dynamic_ncols=True)
    shown = [""]

    def update(done: int, total: int, phase: str = "") -> None:
        if phases and phase != shown[0]:
            shown[0] = phase
            b.set_description(f"{desc}: {phase}", refresh=False)
        if total and b.total != total:
            b.total = total
        b.n = done
        b.refresh()

    try:
        yield update
    finally:
        b.close()
