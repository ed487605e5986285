"""The report's attention viewer inline in a notebook: hover a token to see
where it attends, pick a head; offline (its styles and script travel with the
cell's output, as in the report)."""

from __future__ import annotations

import itertools
from typing import Any, Optional, Sequence

import numpy as np

from . import _native

_count = itertools.count(1)


class AttentionView:
    """An attention viewer a notebook shows (``_repr_html_``); ``html`` is the
    fragment, which also works pasted into any page."""

    def __init__(self, html: str) -> None:
        self.html = html

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return "AttentionView(...)  # shown as HTML in a notebook; .html holds it"


def attention_view(
    pattern: Any,
    tokens: Optional[Sequence[Any]] = None,
    *,
    batch: int = 0,
    head_names: Optional[Sequence[str]] = None,
    title: str = "Attention",
) -> AttentionView:
    """The viewer of ``pattern``: ``[head, query_pos, key_pos]``, or
    ``[batch, head, query_pos, key_pos]`` (TransformerLens's ``hook_pattern``
    layout) with sequence ``batch`` shown; ``tokens`` label the positions
    (their ``str``; the positions themselves by default)."""
    p = np.asarray(pattern, dtype=np.float64)
    if p.ndim == 4:
        p = p[batch]
    if p.ndim != 3 or p.shape[1] != p.shape[2]:
        raise ValueError(f"pattern: shape {np.asarray(pattern).shape}, expected [head, pos, pos] or [batch, head, pos, pos]")
    t = p.shape[-1]
    labels = [str(i) for i in range(t)] if tokens is None else [str(x) for x in tokens]
    if len(labels) != t:
        raise ValueError(f"tokens: {len(labels)} labels for {t} positions")
    names = [f"H{h}" for h in range(p.shape[0])] if head_names is None else list(head_names)
    return AttentionView(_native.attention_html(labels, np.ascontiguousarray(p), names, title, next(_count)))
