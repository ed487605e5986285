"""A trained model from Python: hook points, run_with_cache, run_with_hooks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

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
    arrays in the run's dtype (float32 for an f32 run, else float64) under
    TransformerLens hook names and layouts."""

    def __init__(self, native: Any, run_dir: Any) -> None:
        self._m = native
        self.run_dir = run_dir
        self._points: Optional[Set[str]] = None

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

    def _name(self, name: str) -> str:
        """Our hook name for ``name``, accepting TransformerLens's spelling of the
        embedding hooks: ``embed.hook_embed`` (its HookedEncoder) for our
        ``hook_embed`` and the other way round."""
        if self._points is None:
            self._points = {p["name"] for p in self.hook_points()}
        points = self._points
        if name in points:
            return name
        alias = name[len("embed.") :] if name.startswith("embed.") else "embed." + name
        return alias if alias in points else name  # the native side raises HookError naming the closest

    def run_with_cache(
        self,
        inputs: ArrayLike,
        names_filter: Union[None, str, Sequence[str], Callable[[str], bool]] = None,
        targets: Optional[ArrayLike] = None,
        *,
        names: Optional[Sequence[str]] = None,
    ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """Forward pass on token ids ``[batch, seq]`` (or one sequence), recording
        the hook points ``names_filter`` picks, as TransformerLens takes it: a
        name, a list of names, or a predicate on names (every hook point when
        ``None``). ``names`` is the same as a list. Returns ``(output, {name:
        array})``, keyed by the names as asked."""
        if names is not None:
            if names_filter is not None:
                raise TypeError("run_with_cache: give names_filter or names, not both")
            names_filter = names
        every = [p["name"] for p in self.hook_points()]
        if names_filter is None:
            wanted = every
        elif isinstance(names_filter, str):
            wanted = [names_filter]
        elif callable(names_filter):
            wanted = [n for n in every if names_filter(n)]
        else:
            wanted = list(names_filter)
        ours = [self._name(n) for n in wanted]
        out, cache = self._m.run_with_cache(_tokens(inputs), ours, _targets(targets))
        return out, {asked: cache[our] for asked, our in zip(wanted, ours)}

    def run_with_hooks(self, inputs: ArrayLike, hooks: Sequence[Any], targets: Optional[ArrayLike] = None) -> np.ndarray:
        """Forward pass with ``hooks`` (``Hook`` objects or dicts with the same
        keys) applied in order; returns the output."""
        ds = [_hook(h) for h in hooks]
        for d in ds:
            if isinstance(d.get("name"), str):
                d["name"] = self._name(d["name"])
        return self._m.run_with_hooks(_tokens(inputs), ds, _targets(targets))
