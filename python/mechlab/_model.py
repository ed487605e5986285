"""A trained model from Python, used the way TransformerLens's
``HookedTransformer`` is: hook points, ``run_with_cache`` (an
``ActivationCache``), ``run_with_hooks`` with hook functions or ablations, the
``hooks(...)`` context, ``model(tokens, return_type=...)``, ``model.cfg`` and
the weights in TransformerLens's shapes (``W_Q`` ``[n_layers, n_heads,
d_model, d_head]``...)."""

from __future__ import annotations

import contextlib
import json
import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from . import _native
from ._cache import ActivationCache
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


class HookPoint:
    """What a hook function gets as ``hook``: the point's ``name`` (as
    TransformerLens's ``HookPoint``, whose ``name`` hook functions read)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


def _hook_fn(name: str, fn: Callable[..., Any]) -> Callable[[np.ndarray], np.ndarray]:
    """The native side's ``call(activation)``: ``fn(activation, hook)`` on a
    writable copy; its result, or the copy it changed in place when it returns
    ``None`` (as TransformerLens allows), goes back as float64."""
    point = HookPoint(name)

    def call(act: np.ndarray) -> np.ndarray:
        a = np.array(act)
        out = fn(a, hook=point)
        r = np.asarray(a if out is None else out)
        if r.shape != a.shape:
            raise HookError(f"hook `{name}`: the hook function returned shape {r.shape}, the activation is {a.shape}")
        return np.ascontiguousarray(r, dtype=np.float64)

    return call


def _hook(h: Any) -> Dict[str, Any]:
    if isinstance(h, tuple) and len(h) == 2 and callable(h[1]):
        name, fn = h
        if not isinstance(name, str):
            raise HookError(f"a hook function's point is a hook name, got {type(name).__name__}")
        return {"name": name, "ablation": fn, "_fn": True}
    if isinstance(h, dict):
        d = dict(h)
    elif hasattr(h, "name"):
        d = {k: getattr(h, k) for k in ("name", "ablation", "heads", "positions") if hasattr(h, k)}
    else:
        raise HookError(f"a hook is a dict or an object with a `name`, got {type(h).__name__}")
    if callable(d.get("ablation")):
        d["_fn"] = True
    elif isinstance(d.get("ablation"), np.ndarray) or isinstance(d.get("ablation"), (list, tuple)):
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
        self._context: List[Any] = []
        self._tl: Optional[Tuple[Dict[str, np.ndarray], Dict[str, Any]]] = None

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

    def _wanted(self, names_filter: Union[None, str, Sequence[str], Callable[[str], bool]]) -> List[str]:
        every = [p["name"] for p in self.hook_points()]
        if names_filter is None:
            return every
        if isinstance(names_filter, str):
            return [names_filter]
        if callable(names_filter):
            return [n for n in every if names_filter(n)]
        return list(names_filter)

    def _hooks(self, hooks: Sequence[Any]) -> List[Dict[str, Any]]:
        """The native hook dicts of ``hooks`` after the ``hooks(...)`` context's;
        a hook function whose point is a predicate on names acts at every point
        it accepts."""
        out: List[Dict[str, Any]] = []
        every: Optional[List[str]] = None
        for h in [*self._context, *hooks]:
            if isinstance(h, tuple) and len(h) == 2 and callable(h[0]) and callable(h[1]):
                every = every if every is not None else [p["name"] for p in self.hook_points()]
                out.extend(_hook((n, h[1])) for n in every if h[0](n))
                continue
            out.append(_hook(h))
        for d in out:
            if isinstance(d.get("name"), str):
                d["name"] = self._name(d["name"])
            if d.pop("_fn", False):
                d["ablation"] = _hook_fn(d["name"], d["ablation"])
        return out

    def run_with_cache(
        self,
        inputs: ArrayLike,
        names_filter: Union[None, str, Sequence[str], Callable[[str], bool]] = None,
        targets: Optional[ArrayLike] = None,
        *,
        names: Optional[Sequence[str]] = None,
        return_type: Optional[str] = "logits",
        incl_bwd: bool = False,
        metric: Any = "loss",
    ) -> Tuple[Any, ActivationCache]:
        """Forward pass on token ids ``[batch, seq]`` (or one sequence), recording
        the hook points ``names_filter`` picks, as TransformerLens takes it: a
        name, a list of names, or a predicate on names (every hook point when
        ``None``). ``names`` is the same as a list. Returns ``(output, cache)``,
        the cache an ``ActivationCache`` keyed by the names as asked (also
        ``cache["pattern", 0]``); ``return_type`` as for ``model(...)``. Hooks of
        an enclosing ``hooks(...)`` act first.

        ``incl_bwd=True`` adds, as TransformerLens does, ``cache[name + "_grad"]``:
        the gradient of ``metric`` w.r.t. each recorded activation, from the
        model's own backward (exact; no autograd). ``metric`` is ``"loss"``
        (the mean next-token cross-entropy), ``mechlab.logit_diff(correct,
        incorrect, pos)``, or any ``mechlab.Metric`` (a value and a ``grad``
        w.r.t. the logits). A model without a backward at its hook points
        raises ``HookError`` naming the point."""
        if names is not None:
            if names_filter is not None:
                raise TypeError("run_with_cache: give names_filter or names, not both")
            names_filter = names
        wanted = self._wanted(names_filter)
        ours = [self._name(n) for n in wanted]
        x = _tokens(inputs)
        hooks = self._hooks([])
        if incl_bwd:
            from ._patch import as_metric

            if hooks:
                raise HookError("incl_bwd=True inside hooks(...): gradients are of the model as it is")
            m = as_metric(metric, x)
            out, cache, grads = self._m.run_with_grads(
                x, ours, lambda y: np.ascontiguousarray(m.grad(y), dtype=np.float64)
            )
            acts = {asked: cache[our] for asked, our in zip(wanted, ours)}
            acts.update({asked + "_grad": grads[our] for asked, our in zip(wanted, ours)})
            return self._output(out, x, return_type), ActivationCache(acts, self, x)
        if hooks:
            out, cache = self._m.run_hooked(x, hooks, ours, _targets(targets))
        else:
            out, cache = self._m.run_with_cache(x, ours, _targets(targets))
        acts = {asked: cache[our] for asked, our in zip(wanted, ours)}
        return self._output(out, x, return_type), ActivationCache(acts, self, x)

    def run_with_hooks(
        self,
        inputs: ArrayLike,
        hooks: Sequence[Any] = (),
        targets: Optional[ArrayLike] = None,
        *,
        fwd_hooks: Sequence[Any] = (),
        return_type: Optional[str] = "logits",
    ) -> Any:
        """Forward pass with ``hooks`` and ``fwd_hooks`` applied in order;
        returns the output (``return_type`` as for ``model(...)``). A hook is
        TransformerLens's ``(name, fn)``, where ``fn(activation, hook)`` returns
        the changed array (or changes it in place and returns ``None``) and
        ``name`` may be a predicate on names, or a ``Hook`` (or dict) that
        zero-, mean- or patch-ablates. A hook function runs with the GIL held
        only while it runs; if it raises, the forward stops with its traceback."""
        x = _tokens(inputs)
        out = self._m.run_with_hooks(x, self._hooks([*hooks, *fwd_hooks]), _targets(targets))
        return self._output(out, x, return_type)

    @contextlib.contextmanager
    def hooks(self, fwd_hooks: Sequence[Any] = (), reset_hooks_end: bool = True) -> Iterator["Model"]:
        """A context in which ``fwd_hooks`` act on every forward of this model
        (``model(...)``, ``run_with_hooks``, ``run_with_cache``), as
        TransformerLens's ``model.hooks(fwd_hooks=...)``."""
        before = list(self._context)
        self._context.extend(fwd_hooks)
        try:
            yield self
        finally:
            if reset_hooks_end:
                self._context = before

    def __call__(self, inputs: ArrayLike, return_type: Optional[str] = "logits", loss_per_token: bool = False) -> Any:
        """The forward pass, as TransformerLens's ``model(tokens, return_type=...)``:
        ``"logits"`` (the output), ``"loss"`` (the mean next-token cross-entropy
        of a language model, ``[batch, pos − 1]`` with ``loss_per_token``),
        ``"both"`` (``(logits, loss)``) or ``None``. Hooks of an enclosing
        ``hooks(...)`` act."""
        x = _tokens(inputs)
        out = self._m.run_with_hooks(x, self._hooks([]), None)
        return self._output(out, x, return_type, loss_per_token)

    def _output(self, logits: np.ndarray, x: np.ndarray, return_type: Optional[str], per_token: bool = False) -> Any:
        if return_type is None:
            return None
        if return_type == "logits":
            return logits
        if return_type not in ("loss", "both"):
            raise ValueError(f"return_type {return_type!r}: expected 'logits', 'loss', 'both' or None")
        if logits.ndim != 3 or logits.shape[:2] != x.shape:
            raise HookError(
                f"return_type={return_type!r}: the loss is a language model's, over [batch, pos, d_vocab] logits; "
                f"this model's output is {self.output_layout}"
            )
        lp = logits[:, :-1].astype(np.float64)
        lp = lp - lp.max(-1, keepdims=True)
        lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
        nll = -np.take_along_axis(lp, x[:, 1:, None], -1)[..., 0]
        loss = nll if per_token else nll.mean()
        return loss if return_type == "loss" else (logits, loss)

    # text in and out, for runs whose data has a tokenizer

    def _tokenizer(self) -> Tuple[str, Any]:
        """("bytes", None) or ("json", path) for this run's text, else an error."""
        from pathlib import Path

        cfg = json.loads(_native.read_config_json(self.run_dir))
        data = cfg.get("data", {})
        kept = Path(self.run_dir) / "tokenizer.json"
        if kept.exists():  # a BPE the run trained (transformer, lm-induction)
            return "json", kept
        if cfg.get("experiment") == "transformer" and data.get("file") and not str(data["file"]).endswith(
            (".npy", ".safetensors")
        ):
            if data.get("tokenizer") == "json":
                return "json", Path(data["tokenizer_file"])
            return "bytes", None
        raise HookError(
            f"{self.run_dir}: this run's data has no tokenizer (token ids from a task, arrays or a generator); "
            "pass token ids"
        )

    def to_tokens(self, text: Union[str, Sequence[str]]) -> np.ndarray:
        """Token ids ``[batch, pos]`` (int64) of a text, or of a list of texts
        of one length in tokens, under the run's tokenizer (bytes, a trained
        BPE or the ``tokenizer.json`` it names); no BOS is prepended, as the run
        trained without one."""
        texts = [text] if isinstance(text, str) else list(text)
        kind, path = self._tokenizer()
        rows = [list(t.encode("utf-8")) if kind == "bytes" else _native.encode_text(path, t)[0] for t in texts]
        if len({len(r) for r in rows}) != 1:
            raise HookError(f"to_tokens: the texts have {sorted({len(r) for r in rows})} tokens; one batch needs one length")
        return np.array(rows, dtype=np.int64)

    def to_str_tokens(self, input: Union[str, ArrayLike]) -> List[str]:
        """The pieces of a text, or of one sequence of token ids, as the run's
        tokenizer spells them (bytes as characters, ``\\n`` and ``\\xNN``)."""
        kind, path = self._tokenizer()
        if isinstance(input, str):
            ids = self.to_tokens(input)[0].tolist()
        else:
            ids = np.asarray(input).ravel().tolist()
        if kind == "bytes":
            return [chr(b) if 32 <= b < 127 else ("\\n" if b == 10 else f"\\x{b:02x}") for b in ids]
        return [p if p is not None else str(i) for i, p in zip(ids, _native.token_pieces(path, ids))]

    def to_string(self, tokens: ArrayLike) -> str:
        """The text of one sequence of token ids (bytes decoded as UTF-8)."""
        kind, path = self._tokenizer()
        ids = np.asarray(tokens).ravel().tolist()
        if kind == "bytes":
            return bytes(ids).decode("utf-8", errors="replace")
        return _native.decode_ids(path, ids)

    # causal analysis (mechlab._patch)

    def patch(self, clean: ArrayLike, corrupted: ArrayLike, metric: Any = "loss", kind: str = "head_out") -> Any:
        """Activation patching of ``kind`` (``resid_pre``, ``attn_out``,
        ``mlp_out``, ``head_out``, ``head_out_by_pos``, ``head_pattern``,
        ``head_v``...): a ``Patching`` of the normalised metric, TransformerLens's
        ``get_act_patch_*``."""
        from ._patch import act_patch

        return act_patch(self, clean, corrupted, metric, kind)

    def attribute(self, clean: ArrayLike, corrupted: ArrayLike, metric: Any = "loss", kind: str = "head_out") -> Any:
        """Attribution patching: ``patch``'s cells estimated from one forward
        and backward on the corrupted input."""
        from ._patch import attribute

        return attribute(self, clean, corrupted, metric, kind)

    def path_patch(self, clean: ArrayLike, corrupted: ArrayLike, metric: Any, sender: Any, receiver: Any) -> float:
        """Path patching from head(s) ``sender`` (``(layer, head)`` or a list)
        to later heads' ``(layer, head, "q" | "k" | "v")`` inputs or to
        ``"logits"`` (one or a list): the normalised metric."""
        from ._patch import path_patch

        return path_patch(self, clean, corrupted, metric, sender, receiver)

    # TransformerLens's config and weights

    def _lens(self) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        if self._tl is None:
            state, cfg = _native.transformer_lens_state(self.run_dir, self.step)
            self._tl = (state, json.loads(cfg))
        return self._tl

    @property
    def cfg(self) -> Any:
        """TransformerLens's ``HookedTransformerConfig`` keys of the model
        (``n_layers``, ``d_model``, ``n_heads``, ``d_head``, ``d_mlp``,
        ``d_vocab``, ``n_ctx``, ``act_fn``, ``normalization_type``,
        ``attn_only``, ``eps``) as attributes."""
        c = dict(self._lens()[1])
        c.setdefault("eps", 1e-5)
        return types.SimpleNamespace(**c)

    def state_dict(self) -> Dict[str, np.ndarray]:
        """The weights under TransformerLens's names and shapes (what
        ``Run.export_transformer_lens`` writes)."""
        return dict(self._lens()[0])

    def _stacked(self, leaf: str) -> np.ndarray:
        state, cfg = self._lens()
        names = [f"blocks.{l}.{leaf}" for l in range(cfg["n_layers"])]
        missing = [n for n in names if n not in state]
        if missing:
            raise AttributeError(f"{missing[0]}: this model has no such weight (attn_only={cfg.get('attn_only')})")
        return np.stack([state[n] for n in names])

    @property
    def W_E(self) -> np.ndarray:
        """``[d_vocab, d_model]``"""
        return self._lens()[0]["embed.W_E"]

    @property
    def W_pos(self) -> np.ndarray:
        """``[n_ctx, d_model]``"""
        return self._lens()[0]["pos_embed.W_pos"]

    @property
    def W_U(self) -> np.ndarray:
        """``[d_model, d_vocab]``"""
        return self._lens()[0]["unembed.W_U"]

    @property
    def b_U(self) -> np.ndarray:
        """``[d_vocab]``"""
        return self._lens()[0]["unembed.b_U"]

    @property
    def W_Q(self) -> np.ndarray:
        """``[n_layers, n_heads, d_model, d_head]``"""
        return self._stacked("attn.W_Q")

    @property
    def W_K(self) -> np.ndarray:
        """``[n_layers, n_heads, d_model, d_head]``"""
        return self._stacked("attn.W_K")

    @property
    def W_V(self) -> np.ndarray:
        """``[n_layers, n_heads, d_model, d_head]``"""
        return self._stacked("attn.W_V")

    @property
    def W_O(self) -> np.ndarray:
        """``[n_layers, n_heads, d_head, d_model]``"""
        return self._stacked("attn.W_O")

    @property
    def b_Q(self) -> np.ndarray:
        """``[n_layers, n_heads, d_head]``"""
        return self._stacked("attn.b_Q")

    @property
    def b_K(self) -> np.ndarray:
        """``[n_layers, n_heads, d_head]``"""
        return self._stacked("attn.b_K")

    @property
    def b_V(self) -> np.ndarray:
        """``[n_layers, n_heads, d_head]``"""
        return self._stacked("attn.b_V")

    @property
    def b_O(self) -> np.ndarray:
        """``[n_layers, d_model]``"""
        return self._stacked("attn.b_O")

    @property
    def W_in(self) -> np.ndarray:
        """``[n_layers, d_model, d_mlp]``"""
        return self._stacked("mlp.W_in")

    @property
    def W_out(self) -> np.ndarray:
        """``[n_layers, d_mlp, d_model]``"""
        return self._stacked("mlp.W_out")

    @property
    def b_in(self) -> np.ndarray:
        """``[n_layers, d_mlp]``"""
        return self._stacked("mlp.b_in")

    @property
    def b_out(self) -> np.ndarray:
        """``[n_layers, d_model]``"""
        return self._stacked("mlp.b_out")


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
        return_type: Optional[str] = "logits",
        incl_bwd: bool = False,
        metric: Any = "loss",
    ) -> Tuple[Any, ActivationCache]:
        """``Model.run_with_cache`` on a text, a list of texts or token ids. The
        output is the last block's output ``[batch, pos, d_model]``."""
        return super().run_with_cache(
            self._ids(inputs), names_filter, targets, names=names, return_type=return_type,
            incl_bwd=incl_bwd, metric=metric,
        )

    def run_with_hooks(
        self,
        inputs: TextOrIds,
        hooks: Sequence[Any] = (),
        targets: Optional[ArrayLike] = None,
        *,
        fwd_hooks: Sequence[Any] = (),
        return_type: Optional[str] = "logits",
    ) -> Any:
        """``Model.run_with_hooks`` on a text, a list of texts or token ids."""
        return super().run_with_hooks(self._ids(inputs), hooks, targets, fwd_hooks=fwd_hooks, return_type=return_type)
