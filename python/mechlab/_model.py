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


TextOrIds = Union[str, Sequence[str], ArrayLike]


class Pretrained(Model):
    """A pretrained encoder (``mechlab.load_pretrained``), used the way
    TransformerLens's ``HookedEncoder`` is: ``to_tokens`` / ``to_str_tokens``,
    and ``run_with_cache`` / ``run_with_hooks`` on a text, a list of texts
    (one padded batch) or token ids ``[batch, seq]``. Activations are float64
    arrays under TransformerLens hook names and layouts."""

    def __init__(self, native: Any, tokenizer: Any, path: str) -> None:
        super().__init__(native, path)
        self.tokenizer = tokenizer
        """The model's own tokenizer (``encode``, ``id_to_token``, ``pad_token_id``)."""

    def __repr__(self) -> str:
        return f"Pretrained({str(self.run_dir)!r})"

    @staticmethod
    def _texts(text: Union[str, Sequence[str]]) -> List[str]:
        texts = [text] if isinstance(text, str) else list(text)
        bad = [t for t in texts if not isinstance(t, str)]
        if bad or not texts:
            raise TypeError(
                "text: expected a str or a non-empty list of str"
                + (f", got an item of type {type(bad[0]).__name__}" if bad else "")
            )
        return texts

    def to_tokens(self, text: Union[str, Sequence[str]]) -> np.ndarray:
        """Token ids ``[batch, seq]`` (int64) of a text or a list of texts:
        ``[CLS] … [SEP]``, truncated to the model's context, padded with the
        model's pad id to the longest."""
        ids: np.ndarray = self.tokenizer.encode(self._texts(text))[0]
        return ids

    def to_str_tokens(self, text: Union[str, Sequence[str]]) -> Union[List[str], List[List[str]]]:
        """The pieces of a text (a list of str), or of each of a list of texts."""
        pieces: List[List[str]] = self.tokenizer.encode(self._texts(text))[1]
        return pieces[0] if isinstance(text, str) else pieces

    def _ids(self, inputs: TextOrIds) -> ArrayLike:
        if isinstance(inputs, str):
            return self.to_tokens(inputs)
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
            return self.to_tokens(inputs)
        return inputs

    def run_with_cache(
        self,
        inputs: TextOrIds,
        names_filter: Union[None, str, Sequence[str], Callable[[str], bool]] = None,
        targets: Optional[ArrayLike] = None,
        *,
        names: Optional[Sequence[str]] = None,
    ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """``Model.run_with_cache`` on a text, a list of texts or token ids. The
        output is the last block's output ``[batch, pos, d_model]``."""
        return super().run_with_cache(self._ids(inputs), names_filter, targets, names=names)

    def run_with_hooks(self, inputs: TextOrIds, hooks: Sequence[Any], targets: Optional[ArrayLike] = None) -> np.ndarray:
        """``Model.run_with_hooks`` on a text, a list of texts or token ids."""
        return super().run_with_hooks(self._ids(inputs), hooks, targets)
