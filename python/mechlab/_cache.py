"""TransformerLens's ``ActivationCache`` habits on mechlab's caches: short names
(``cache["pattern", 0]``), layers stacked, the residual stream decomposed, the
final LayerNorm's scale applied to a stack, and logit attributions.

The names follow TransformerLens's ``utils.get_act_name``: ``("pattern", 0)`` is
``blocks.0.attn.hook_pattern``, ``("resid_pre", 1)`` is ``blocks.1.hook_resid_pre``,
``"embed"`` is ``hook_embed``. ``apply_ln_to_stack`` centres each vector and
divides it by the LayerNorm scale of the residual stream it joins, and
``logit_attrs`` multiplies by the unembedding with the final LayerNorm's gain
folded in: TransformerLens's numbers on a model loaded with its default
``fold_ln``, and the transformer experiment's logged ``dla.l{l}.h{h}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np


if TYPE_CHECKING:
    from ._model import Model

#: TransformerLens's other spellings of activation names.
_ALIAS = {
    "attn": "pattern",
    "attn_logits": "attn_scores",
    "key": "k",
    "query": "q",
    "value": "v",
    "mlp_pre": "pre",
    "mlp_post": "post",
}
_IN_ATTN = {"q", "k", "v", "z", "result", "pattern", "attn_scores", "rot_q", "rot_k"}
_IN_MLP = {"pre", "post", "mid", "pre_linear"}
_SUBLAYER = {"a": "attn", "attention": "attn", "m": "mlp", "b": "", "block": "", "blocks": ""}


def act_name(name: str, layer: Optional[int] = None, layer_type: Optional[str] = None) -> str:
    """The full hook name of a short one, as TransformerLens's ``get_act_name``:
    ``act_name("pattern", 0) == "blocks.0.attn.hook_pattern"``. A full name comes
    back unchanged."""
    if layer is None and ("." in name or name.startswith("hook_")):
        return name
    name = _ALIAS.get(name, name)
    kind = layer_type
    if name in _IN_ATTN:
        kind = "attn"
    elif name in _IN_MLP:
        kind = "mlp"
    elif kind is not None:
        kind = _SUBLAYER.get(kind, kind)
    parts = [] if layer is None else ["blocks", str(layer)]
    if kind:
        parts.append(kind)
    parts.append(f"hook_{name}")
    return ".".join(parts)


Key = Union[str, Tuple[Any, ...]]


class ActivationCache:
    """The activations of one forward (``Model.run_with_cache``), read by full
    name or TransformerLens's short keys (``cache["pattern", 0]``,
    ``cache["resid_post", -1]``), with the gradients beside them when the run
    asked for them. Behaves as a read-only dict of arrays."""

    def __init__(self, acts: Dict[str, np.ndarray], model: "Model", tokens: np.ndarray) -> None:
        self._acts = acts
        self.model = model
        self.tokens = tokens

    def _full(self, key: Key) -> str:
        if isinstance(key, str):
            full = act_name(key)
        elif isinstance(key, tuple) and key and isinstance(key[0], str):
            layer = key[1] if len(key) > 1 else None
            if isinstance(layer, (int, np.integer)) and layer < 0:
                layer = self.model.cfg.n_layers + int(layer)
            full = act_name(key[0], None if layer is None else int(layer), key[2] if len(key) > 2 else None)
        else:
            raise KeyError(f"{key!r}: a cache key is a hook name or (name, layer[, sublayer])")
        if full not in self._acts:
            alias = full[len("embed.") :] if full.startswith("embed.") else "embed." + full
            if alias in self._acts:
                return alias
            raise KeyError(f"{full!r} is not in this cache (it holds {', '.join(sorted(self._acts)) or 'nothing'})")
        return full

    def __getitem__(self, key: Key) -> np.ndarray:
        return self._acts[self._full(key)]

    def __contains__(self, key: object) -> bool:
        try:
            self._full(key)  # type: ignore[arg-type]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._acts)

    def __len__(self) -> int:
        return len(self._acts)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self._acts)} activations: {', '.join(list(self._acts)[:4])}{', ...' if len(self._acts) > 4 else ''})"

    def keys(self) -> Any:
        return self._acts.keys()

    def values(self) -> Any:
        return self._acts.values()

    def items(self) -> Any:
        return self._acts.items()

    def get(self, key: Key, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def attention_view(self, layer: int = 0, batch: int = 0, tokens: Optional[Sequence[Any]] = None) -> Any:
        """Layer ``layer``'s heads on sequence ``batch`` in the report's
        attention viewer, inline in a notebook (``tokens`` label the positions;
        the token ids by default)."""
        return _view(self, layer, batch, tokens)

    def stack_activation(self, activation_name: str, layer: int = -1, sublayer_type: Optional[str] = None) -> np.ndarray:
        """``activation_name`` of every layer before ``layer`` (all of them for
        ``-1``), stacked: ``[n_layers, ...]``."""
        n = self.model.cfg.n_layers if layer == -1 else layer
        return np.stack([self[(activation_name, l, sublayer_type)] for l in range(n)])

    def accumulated_resid(
        self, layer: Optional[int] = None, incl_mid: bool = False, apply_ln: bool = False, return_labels: bool = False
    ) -> Union[np.ndarray, Tuple[np.ndarray, List[str]]]:
        """The residual stream into each layer before ``layer`` (all, and the
        final stream, when ``None``): ``[component, batch, pos, d_model]``."""
        n_layers = self.model.cfg.n_layers
        upto = n_layers + 1 if layer is None or layer == -1 else layer
        parts, labels = [], []
        for l in range(upto):
            if l == n_layers:
                parts.append(self[("resid_post", n_layers - 1)])
                labels.append("final_post")
                continue
            parts.append(self[("resid_pre", l)])
            labels.append(f"{l}_pre")
            if incl_mid and l < upto - 1 and ("resid_mid", l) in self:
                parts.append(self[("resid_mid", l)])
                labels.append(f"{l}_mid")
        stack = np.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack)
        return (stack, labels) if return_labels else stack

    def decompose_resid(
        self,
        layer: Optional[int] = None,
        mlp_input: bool = False,
        mode: str = "all",
        apply_ln: bool = False,
        incl_embeds: bool = True,
        return_labels: bool = False,
    ) -> Union[np.ndarray, Tuple[np.ndarray, List[str]]]:
        """What each part wrote into the residual stream before ``layer`` (all of
        them when ``None``): the embeddings, then each layer's attention and MLP
        output, ``[component, batch, pos, d_model]``; ``mode`` ``"attn"`` or
        ``"mlp"`` keeps one kind; ``mlp_input`` adds layer ``layer``'s attention."""
        cfg = self.model.cfg
        upto = cfg.n_layers if layer is None or layer == -1 else layer
        parts, labels = [], []
        if incl_embeds:
            for name, label in (("hook_embed", "embed"), ("hook_pos_embed", "pos_embed")):
                if name in self:
                    parts.append(self[name])
                    labels.append(label)
        for l in range(upto + (1 if mlp_input and layer is not None else 0)):
            if mode in ("all", "attn"):
                parts.append(self[("attn_out", l)])
                labels.append(f"{l}_attn_out")
            if mode in ("all", "mlp") and l < upto and not cfg.attn_only:
                parts.append(self[("mlp_out", l)])
                labels.append(f"{l}_mlp_out")
        stack = np.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer)
        return (stack, labels) if return_labels else stack

    def stack_head_results(
        self, layer: int = -1, apply_ln: bool = False, return_labels: bool = False
    ) -> Union[np.ndarray, Tuple[np.ndarray, List[str]]]:
        """Each head's output into the residual stream (``hook_z`` through its
        slice of ``W_O``, without ``b_O``), heads of the layers before ``layer``:
        ``[layer·head, batch, pos, d_model]``, labels ``L{l}H{h}``."""
        n = self.model.cfg.n_layers if layer == -1 else layer
        w_o = self.model.W_O
        parts, labels = [], []
        for l in range(n):
            z = self[("z", l)]  # [batch, pos, head, d_head]
            for h in range(z.shape[2]):
                parts.append(z[:, :, h, :] @ w_o[l, h])
                labels.append(f"L{l}H{h}")
        stack = np.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer if layer != -1 else None)
        return (stack, labels) if return_labels else stack

    def _final_resid(self) -> np.ndarray:
        return self[("resid_post", self.model.cfg.n_layers - 1)]

    def apply_ln_to_stack(self, residual_stack: np.ndarray, layer: Optional[int] = None) -> np.ndarray:
        """``residual_stack`` (``[..., batch, pos, d_model]``) centred and divided
        by the LayerNorm scale of the residual stream it joins: the final one
        (``layer`` ``None``), or the stream into block ``layer``'s attention."""
        cfg = self.model.cfg
        if getattr(cfg, "normalization_type", None) != "LN":
            return residual_stack
        x = self._final_resid() if layer is None or layer >= cfg.n_layers else self[("resid_pre", layer)]
        xc = x - x.mean(-1, keepdims=True)
        scale = np.sqrt((xc**2).mean(-1, keepdims=True) + cfg.eps)
        stack = residual_stack - residual_stack.mean(-1, keepdims=True)
        out: np.ndarray = stack / scale
        return out

    def logit_attrs(
        self,
        residual_stack: np.ndarray,
        tokens: Union[int, Sequence[int], np.ndarray],
        incorrect_tokens: Union[None, int, Sequence[int], np.ndarray] = None,
        has_batch_dim: bool = True,
    ) -> np.ndarray:
        """Each component's logit for ``tokens`` (one per batch and position of
        the stack, or one id), minus that for ``incorrect_tokens`` when given:
        ``residual_stack`` (``[component, ..., d_model]``, already through
        ``apply_ln_to_stack``) times the unembedding's columns, with the final
        LayerNorm's gain folded in as TransformerLens's default ``fold_ln``
        loading has it."""
        w_u = self.model.W_U
        if getattr(self.model.cfg, "normalization_type", None) == "LN":
            # the final LayerNorm's gain folded into the unembedding (fold_ln)
            w_u = self.model.state_dict()["ln_final.w"][:, None] * w_u
        dirs = w_u[:, np.asarray(tokens)]  # [d_model, ...]
        if incorrect_tokens is not None:
            dirs = dirs - w_u[:, np.asarray(incorrect_tokens)]
        dirs = np.moveaxis(dirs, 0, -1)  # [..., d_model]
        out: np.ndarray = (residual_stack * dirs).sum(-1)
        return out


def _view(cache: "ActivationCache", layer: int, batch: int, tokens: Optional[Sequence[Any]]) -> Any:
    from ._view import attention_view

    labels = tokens if tokens is not None else [str(int(t)) for t in cache.tokens[batch]]
    return attention_view(
        cache[("pattern", layer)], labels, batch=batch, title=f"Attention of layer {layer}, sequence {batch}",
        head_names=[f"L{layer}H{h}" for h in range(cache[("pattern", layer)].shape[1])],
    )
