"""A trained model from Python: hook points, run_with_cache, run_with_hooks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._errors import HookError

ArrayLike = Any


@dataclass
class Hook:
    """One intervention on a named activation: ``ablation`` is ``"zero"``,
    ``"mean"`` (over the batch) or an array of the activation's shape to patch in;
    ``heads`` and ``positions`` restrict it (``None``: all)."""

    name: str
    ablation: Union[str, np.ndarray] = "zero"
    heads: Optional[Sequence[int]] = None
    positions: Optional[Sequence[int]] = None


def _tokens(inputs: ArrayLike) -> np.ndarray:
    a = np.asarray(inputs)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.size == 0:
        raise HookError(f"inputs: expected token ids as [batch, seq], got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise HookError(f"inputs: expected integer token ids, got {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64)


def _targets(targets: Optional[ArrayLike]) -> Optional[np.ndarray]:
    return None if targets is None else np.ascontiguousarray(np.asarray(targets), dtype=np.int64)


def _hook(h: Any) -> Dict[str, Any]:
    if isinstance(h, dict):
        d = dict(h)
    elif hasattr(h, "name"):
        d = {k: getattr(h, k) for k in ("name", "ablation", "heads", "positions") if hasattr(h, k)}
    else:
        raise HookError(f"a hook is a dict or an object with a `name`, got {type(h).__name__}")
    if isinstance(d.get("ablation"), np.ndarray) or isinstance(d.get("ablation"), (list, tuple)):
        d["ablation"] = np.ascontiguousarray(d["ablation"], dtype=np.float64)
    return d


class Model:
    """A run's model at one checkpoint (``Run.model(step)``). Activations are
    float64 arrays under TransformerLens hook names and layouts."""

    def __init__(self, native: Any, run_dir: Any) -> None:
        self._m = native
        self.run_dir = run_dir

    def __repr__(self) -> str:
        return f"Model({str(self.run_dir)!r}, step={self.step})"

    @property
    def step(self) -> int:
        """The checkpoint step the weights come from."""
        return self._m.step

    @property
    def output_layout(self) -> str:
        """The output's axes, e.g. ``[batch, d_vocab]``."""
        return self._m.output_layout()

    def hook_points(self) -> List[Dict[str, str]]:
        """Every hook point in forward order: ``name``, ``layout``, ``doc``."""
        return self._m.hook_points()

    def run_with_cache(
        self, inputs: ArrayLike, names: Optional[Sequence[str]] = None, targets: Optional[ArrayLike] = None
    ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """Forward pass on token ids ``[batch, seq]`` (or one sequence), recording
        ``names`` (every hook point by default): ``(output, {name: array})``."""
        if names is None:
            names = [p["name"] for p in self.hook_points()]
        elif isinstance(names, str):
            names = [names]
        return self._m.run_with_cache(_tokens(inputs), list(names), _targets(targets))

    def run_with_hooks(self, inputs: ArrayLike, hooks: Sequence[Any], targets: Optional[ArrayLike] = None) -> np.ndarray:
        """Forward pass with ``hooks`` (``Hook`` objects or dicts with the same
        keys) applied in order; returns the output."""
        return self._m.run_with_hooks(_tokens(inputs), [_hook(h) for h in hooks], _targets(targets))
