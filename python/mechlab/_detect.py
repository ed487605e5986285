"""``mechlab.detect_head``: TransformerLens's head detector on any model and any
tokens, with a detection pattern given by name, as a ``[T, T]`` array, or as a
function of a sequence's tokens."""

from __future__ import annotations

from typing import Any, Callable, Union

import numpy as np
import numpy.typing as npt

Pattern = Union[str, npt.ArrayLike, Callable[[np.ndarray], npt.ArrayLike]]


def _builtin(name: str, toks: np.ndarray) -> np.ndarray:
    """TransformerLens's built-in detection patterns (as ``probes.rs`` builds them)."""
    t = len(toks)
    if name == "previous_token":
        return np.eye(t, k=-1)
    dup = np.tril(toks[:, None] == toks[None, :], k=-1).astype(float)
    if name == "duplicate_token":
        return dup
    if name == "induction":
        ind = np.zeros((t, t))
        # x_{j-1} = x_i with 1 <= j <= i (the duplicate pattern shifted one key right)
        ind[:, 1:] = (toks[:, None] == toks[None, :-1]) & (np.arange(1, t)[None, :] <= np.arange(t)[:, None])
        return ind
    raise ValueError(f"pattern {name!r}: expected previous_token, duplicate_token, induction, an array or a function")


def detect_head(model: Any, tokens: npt.ArrayLike, pattern: Pattern) -> np.ndarray:
    """Each head's score ``[n_layers, n_heads]`` for ``pattern`` on ``tokens``
    (``[batch, T]`` or one sequence), TransformerLens's ``detect_head`` with its
    default ``"mul"`` measure: the head's attention mass on the pattern's
    positions, ``Σ A⊙D / Σ A``, averaged over the sequences. ``pattern`` is a
    built-in name (``"previous_token"``, ``"duplicate_token"``, ``"induction"``),
    a ``[T, T]`` array, or ``fn(tokens_of_one_sequence) -> [T, T]``. The
    transformer experiment logs the built-in ones at every probe step."""
    x = np.asarray(tokens)
    if x.ndim == 1:
        x = x[None, :]
    names = [p["name"] for p in model.hook_points() if p["name"].endswith("attn.hook_pattern")]
    _, cache = model.run_with_cache(x, names)
    layers = [cache[n] for n in names]  # each [batch, head, q, k]
    n, t = x.shape
    out = np.zeros((len(layers), layers[0].shape[1]))
    for s in range(n):
        if isinstance(pattern, str):
            det = _builtin(pattern, x[s])
        elif callable(pattern):
            det = np.asarray(pattern(x[s]), dtype=float)
        else:
            det = np.asarray(pattern, dtype=float)
        if det.shape != (t, t):
            raise ValueError(f"pattern: shape {det.shape}, expected [T, T] = [{t}, {t}]")
        for li, a in enumerate(layers):
            aa = a[s].astype(float)  # [head, q, k]
            out[li] += (aa * det).sum(axis=(1, 2)) / aa.sum(axis=(1, 2)) / n
    return out
