"""Causal analysis from Python: metrics with their gradients, activation-patching
sweeps in the manner of TransformerLens's ``patching.get_act_patch_*``, and
attribution patching (Nanda 2023), the first-order estimate of every such patch
from one forward and backward on the corrupted input.

Every sweep patches the clean run's activation into the corrupted run, one
(layer, position, head) cell at a time, and reports the normalised metric
``(patched − corrupted) / (clean − corrupted)``: 1 where the cell carries the
whole difference, 0 where it carries none. Attribution patching estimates the
same cells as ``(clean − corrupted activation) · ∂metric/∂activation`` at the
corrupted run, normalised the same way; for a metric linear in the activation
the two agree to rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._errors import HookError

if TYPE_CHECKING:
    from ._model import Model

ArrayLike = Any


class Metric:
    """A scalar of the model's output with its gradient: ``metric(logits)``
    and ``metric.grad(logits)`` (same shape as the logits)."""

    def __call__(self, logits: np.ndarray) -> float:
        raise NotImplementedError

    def grad(self, logits: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class Loss(Metric):
    """The mean next-token cross-entropy (the targets are the inputs shifted by
    one) at ``positions`` (every position but the last by default), as
    ``model(tokens, return_type="loss")``; e.g. the repeated half of a repeated
    sequence, or the positions where an earlier copy predicts the next token."""

    def __init__(self, tokens: ArrayLike, positions: Optional[ArrayLike] = None) -> None:
        self.tokens = np.asarray(tokens)
        t = self.tokens.shape[1]
        self.positions = np.arange(t - 1) if positions is None else np.asarray(positions, dtype=np.int64).ravel()
        bad = self.positions[(self.positions < 0) | (self.positions >= t - 1)]
        if bad.size or not self.positions.size:
            raise HookError(
                f"metric: position {int(bad[0]) if bad.size else 'none'} has no next token in a sequence of {t} positions"
            )

    def _logp(self, logits: np.ndarray) -> np.ndarray:
        z = logits[:, self.positions].astype(np.float64)
        z = z - z.max(-1, keepdims=True)
        out: np.ndarray = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return out

    def _targets(self) -> np.ndarray:
        return self.tokens[:, self.positions + 1, None]

    def __call__(self, logits: np.ndarray) -> float:
        lp = self._logp(logits)
        return float(-np.take_along_axis(lp, self._targets(), -1).mean())

    def grad(self, logits: np.ndarray) -> np.ndarray:
        p = np.exp(self._logp(logits))
        y = self._targets()
        np.put_along_axis(p, y, np.take_along_axis(p, y, -1) - 1.0, -1)
        g = np.zeros(logits.shape)
        part = p / p.shape[0] / p.shape[1]
        for j, at in enumerate(self.positions):  # (a position may be listed twice)
            g[:, at] += part[:, j]
        return g


class LogitDiff(Metric):
    """The mean over the batch of ``logits[b, pos, correct_b] −
    logits[b, pos, incorrect_b]`` (``pos`` one index for every sequence, or one
    per sequence; the ids one, or one per sequence)."""

    def __init__(self, correct: ArrayLike, incorrect: ArrayLike, pos: ArrayLike = -1) -> None:
        self.correct, self.incorrect, self.pos = correct, incorrect, pos

    def _index(self, logits: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        b, t = logits.shape[0], logits.shape[1]
        pos = np.broadcast_to(np.asarray(self.pos), (b,)).astype(np.int64)
        bad = pos[(pos >= t) | (pos < -t)]
        if bad.size:
            raise HookError(f"metric: position {int(bad[0])} is past the sequence of {t} positions")
        pos = np.where(pos < 0, pos + t, pos)
        rows = np.arange(b)
        c = np.broadcast_to(np.asarray(self.correct), (b,)).astype(np.int64)
        w = np.broadcast_to(np.asarray(self.incorrect), (b,)).astype(np.int64)
        return rows, pos, c, w

    def __call__(self, logits: np.ndarray) -> float:
        r, p, c, w = self._index(logits)
        return float((logits[r, p, c].astype(np.float64) - logits[r, p, w]).mean())

    def grad(self, logits: np.ndarray) -> np.ndarray:
        r, p, c, w = self._index(logits)
        g = np.zeros(logits.shape)
        np.add.at(g, (r, p, c), 1.0 / len(r))
        np.add.at(g, (r, p, w), -1.0 / len(r))
        return g


def logit_diff(correct: ArrayLike, incorrect: ArrayLike, pos: ArrayLike = -1) -> LogitDiff:
    """The metric ``logits[correct] − logits[incorrect]`` at ``pos``, averaged over the batch."""
    return LogitDiff(correct, incorrect, pos)


MetricLike = Union[str, Metric, Callable[[np.ndarray], Any]]


def as_metric(metric: MetricLike, tokens: np.ndarray) -> Metric:
    if isinstance(metric, Metric):
        return metric
    if metric == "loss":
        return Loss(tokens)
    raise TypeError(
        f"metric: expected 'loss', mechlab.logit_diff(...) or another mechlab Metric, got {metric!r}"
    )


#: What each sweep patches: (hook leaf, per-head, sweep over positions).
SWEEPS: Dict[str, Tuple[str, bool, bool]] = {
    "resid_pre": ("hook_resid_pre", False, True),
    "resid_mid": ("hook_resid_mid", False, True),
    "resid_post": ("hook_resid_post", False, True),
    "attn_out": ("hook_attn_out", False, True),
    "mlp_out": ("hook_mlp_out", False, True),
    "head_out": ("attn.hook_z", True, False),
    "head_out_by_pos": ("attn.hook_z", True, True),
    "head_pattern": ("attn.hook_pattern", True, False),
    "head_pattern_by_pos": ("attn.hook_pattern", True, True),
    "head_v": ("attn.hook_v", True, False),
    "head_q": ("attn.hook_q", True, False),
    "head_k": ("attn.hook_k", True, False),
}


def _pair(model: "Model", clean: ArrayLike, corrupted: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
    from ._model import _tokens

    c, x = _tokens(clean), _tokens(corrupted)
    if c.shape != x.shape:
        raise HookError(f"clean tokens {c.shape} and corrupted tokens {x.shape}: a patch needs the same shape")
    return c, x


def _names(model: "Model", kind: str) -> Tuple[List[str], bool, bool]:
    if kind not in SWEEPS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(SWEEPS)}")
    leaf, per_head, by_pos = SWEEPS[kind]
    points = {p["name"] for p in model.hook_points()}
    n_layers = len({p.split(".")[1] for p in points if p.startswith("blocks.")})
    names = [f"blocks.{l}.{leaf}" for l in range(n_layers)]
    missing = [n for n in names if n not in points]
    if missing or not names:
        raise HookError(f"kind {kind!r}: this model has no {missing[0] if missing else 'blocks.0.' + leaf}")
    return names, per_head, by_pos


def leaf_is_pattern(name: str) -> bool:
    return name.endswith("hook_pattern")


class Patching:
    """The result of a patching sweep or its attribution estimate: ``values``
    (``[layer, pos]``, ``[layer, head]`` or ``[layer, pos, head]``, normalised
    as the module says), the axes' ``labels``, the clean and corrupted
    metric."""

    def __init__(self, kind: str, values: np.ndarray, axes: List[str], clean: float, corrupted: float) -> None:
        self.kind, self.values, self.axes = kind, values, axes
        self.clean, self.corrupted = clean, corrupted

    def __repr__(self) -> str:
        return f"Patching({self.kind!r}, {'×'.join(self.axes)} {self.values.shape}, clean {self.clean:.4g}, corrupted {self.corrupted:.4g})"


def act_patch(model: "Model", clean: ArrayLike, corrupted: ArrayLike, metric: MetricLike, kind: str) -> Patching:
    """Activation patching of ``kind`` (see ``SWEEPS``): each cell's clean
    activation patched into the corrupted run, the metric normalised."""
    from ._model import Hook

    c, x = _pair(model, clean, corrupted)
    m = as_metric(metric, x)
    names, per_head, by_pos = _names(model, kind)
    clean_out, cache = model.run_with_cache(c, names)
    m_clean, m_corr = m(clean_out), m(model(x))
    denom = m_clean - m_corr
    first = cache[names[0]]
    nh = first.shape[1] if leaf_is_pattern(names[0]) else (first.shape[2] if first.ndim == 4 else 1)
    t = c.shape[1]
    shape = [len(names)] + ([t] if by_pos else []) + ([nh] if per_head else [])
    out = np.zeros(shape)
    for li, name in enumerate(names):
        act = np.ascontiguousarray(cache[name], dtype=np.float64)
        cells = list(np.ndindex(*shape[1:]))
        spec = [([int(i[-1])] if per_head else None, [int(i[0])] if by_pos else None) for i in cells]
        if model._context:  # Python hook functions are on: the forwards go one by one
            values = [m(model.run_with_hooks(x, [Hook(name, act, heads=h, positions=p)])) for h, p in spec]
        else:
            # one call for the layer: the model runs the patched forwards in
            # parallel, each resumed at the patched point, and hands each
            # output to the metric as it comes
            values = model._m.run_patched(x, model._name(name), act, spec, m)
        for idx, v in zip(cells, values):
            out[(li, *idx)] = (v - m_corr) / denom
    axes = ["layer"] + (["pos"] if by_pos else []) + (["head"] if per_head else [])
    return Patching(kind, out, axes, m_clean, m_corr)


def attribute(model: "Model", clean: ArrayLike, corrupted: ArrayLike, metric: MetricLike, kind: str) -> Patching:
    """Attribution patching of ``kind``: every cell of ``act_patch`` estimated
    from one forward and backward on the corrupted input, ``(clean −
    corrupted activation) · ∂metric/∂activation``, normalised the same way."""
    c, x = _pair(model, clean, corrupted)
    m = as_metric(metric, x)
    names, per_head, by_pos = _names(model, kind)
    if model._context:
        raise HookError("attribute inside hooks(...): gradients are of the model as it is")
    # one native call: the estimate per [layer, pos, head] is formed where the
    # activations are, none crosses into Python
    clean_out, corr_out, cells = model._m.attribute_cells(
        c, x, [model._name(n) for n in names], lambda y: np.asarray(m.grad(y), dtype=np.float64)
    )
    m_clean, m_corr = m(clean_out), m(corr_out)
    denom = m_clean - m_corr
    # [layer, pos, head]: the patch's first-order effect on the batch mean
    out = cells.sum(axis=1) if not by_pos else cells
    out = (out if per_head else out[..., 0]) / denom
    axes = ["layer"] + (["pos"] if by_pos else []) + (["head"] if per_head else [])
    return Patching(kind, out, axes, m_clean, m_corr)


def _ln(model: "Model", x: np.ndarray, which: str) -> np.ndarray:
    """LayerNorm ``which`` (``blocks.{l}.ln1``, ``ln_final``) of ``x``, or ``x``
    itself for a model without normalisation."""
    if getattr(model.cfg, "normalization_type", None) != "LN":
        return x
    sd = model.state_dict()
    xc = x - x.mean(-1, keepdims=True)
    out: np.ndarray = xc / np.sqrt((xc**2).mean(-1, keepdims=True) + model.cfg.eps) * sd[f"{which}.w"] + sd[f"{which}.b"]
    return out


Head = Tuple[int, int]
Receiver = Union[str, Tuple[int, int, str]]


def _heads(x: Any) -> List[Any]:
    """One head (a tuple) or a list of them."""
    return [x] if isinstance(x, tuple) or isinstance(x, str) else list(x)


def path_patch(
    model: "Model",
    clean: ArrayLike,
    corrupted: ArrayLike,
    metric: MetricLike,
    sender: Union[Head, Sequence[Head]],
    receiver: Union[Receiver, Sequence[Receiver]],
) -> float:
    """Path patching (Wang et al. 2022; Goldowsky-Dill et al. 2023): the clean
    output of the ``sender`` head(s) (``(layer, head)``, or a list) patched into
    the corrupted run along the paths to the ``receiver``(s) only, every other
    component left at its corrupted value: into ``(layer, head, "q" | "k" |
    "v")``'s query, key or value input (through its LayerNorm), or
    ``"logits"`` (the direct path through the final LayerNorm and the
    unembedding). Returns the normalised metric ``(patched − corrupted) /
    (clean − corrupted)``."""
    from ._model import Hook

    c, x = _pair(model, clean, corrupted)
    m = as_metric(metric, x)
    cfg = model.cfg
    senders = _heads(sender)
    receivers = _heads(receiver)
    for ls, hs in senders:
        if not (0 <= ls < cfg.n_layers and 0 <= hs < cfg.n_heads):
            raise HookError(f"sender ({ls}, {hs}): the model has {cfg.n_layers} layers of {cfg.n_heads} heads")
    last = max(ls for ls, _ in senders)
    for r in receivers:
        if r == "logits":
            continue
        if not (isinstance(r, tuple) and len(r) == 3 and r[2] in ("q", "k", "v")):
            raise HookError(f"receiver {r!r}: expected (layer, head, 'q' | 'k' | 'v') or 'logits'")
        if not (last < r[0] < cfg.n_layers and 0 <= r[1] < cfg.n_heads):
            raise HookError(f"receiver {r!r}: a receiver is a head of a later layer than every sender's ({last})")
    zs = sorted({f"blocks.{ls}.attn.hook_z" for ls, _ in senders})
    final = f"blocks.{cfg.n_layers - 1}.hook_resid_post"
    needs = list(zs)
    for r in receivers:
        needs += [final] if r == "logits" else [f"blocks.{r[0]}.hook_resid_pre", f"blocks.{r[0]}.attn.hook_{r[2]}"]
    needs = list(dict.fromkeys(needs))
    clean_out, cc = model.run_with_cache(c, zs)
    corr_out, xc = model.run_with_cache(x, needs)
    # what the senders write into the residual stream, clean minus corrupted
    w_o = model.W_O
    delta = sum(
        (np.asarray(cc[f"blocks.{ls}.attn.hook_z"], np.float64)[:, :, hs]
         - np.asarray(xc[f"blocks.{ls}.attn.hook_z"], np.float64)[:, :, hs]) @ w_o[ls, hs]
        for ls, hs in senders
    )
    hooks: Dict[str, Any] = {}
    for r in receivers:
        if r == "logits":
            hooks[final] = Hook(final, np.asarray(xc[final], np.float64) + delta)
            continue
        lr, hr, which = r
        name = f"blocks.{lr}.attn.hook_{which}"
        if name not in hooks:
            hooks[name] = Hook(name, np.array(xc[name], np.float64), heads=[])
        resid = np.asarray(xc[f"blocks.{lr}.hook_resid_pre"], np.float64) + delta
        w = {"q": model.W_Q, "k": model.W_K, "v": model.W_V}[which][lr, hr]
        b = {"q": model.b_Q, "k": model.b_K, "v": model.b_V}[which][lr, hr]
        hooks[name].ablation[:, :, hr] = _ln(model, resid, f"blocks.{lr}.ln1") @ w + b
        hooks[name].heads = sorted({*(hooks[name].heads or []), hr})
    m_clean, m_corr = m(clean_out), m(corr_out)
    return (m(model.run_with_hooks(x, list(hooks.values()))) - m_corr) / (m_clean - m_corr)
