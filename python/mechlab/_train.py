"""``mechlab.train``: the general transformer on a task, arrays or a generator of
the researcher's own (the ``transformer`` experiment; docs/transformer.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _native
from ._api import _call, _overrides, _path, _seed
from ._errors import ConfigError
from ._progress import bar
from ._run import PathLike, Run

Batch = Union[np.ndarray, Tuple[np.ndarray, Optional[np.ndarray]]]
Generator = Callable[[int, np.random.Generator], Batch]
PatternFn = Callable[[np.ndarray], Any]

#: The folder of a run that holds the arrays ``train`` was given.
INPUTS = "inputs"


def _flatten(d: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``{"model": {"n_layers": 2}}`` and ``{"model.n_layers": 2}`` alike, as dotted keys."""
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if not isinstance(k, str):
            raise TypeError(f"config: keys are strings like 'model.n_layers', got {k!r}")
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and k not in ("lr_scale",):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _ids(value: Any, name: str, *, rank: Tuple[int, ...] = (1, 2)) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise ConfigError(f"{name}: dtype {a.dtype}: token ids must be integers (cast with .astype(np.int64))")
    if a.ndim not in rank:
        raise ConfigError(f"{name}: shape {a.shape}: token ids are [N, L] windows or a flat [N] stream")
    if a.size == 0:
        raise ConfigError(f"{name}: holds no tokens (shape {a.shape})")
    if (a < 0).any():
        i = np.unravel_index(int(np.argmin(a)), a.shape)
        raise ConfigError(f"{name}: token {int(a[i])} at {list(map(int, i))}: token ids are >= 0")
    return np.ascontiguousarray(a, dtype=np.int64)


def _mask(value: Any, name: str, shape: Tuple[int, ...]) -> np.ndarray:
    m = np.asarray(value)
    if m.shape != shape:
        raise ConfigError(f"{name}: shape {m.shape}, but the tokens have shape {shape}")
    if m.dtype.kind not in "biu":
        raise ConfigError(f"{name}: dtype {m.dtype}: a loss mask is bool (or 0/1 integers)")
    return np.ascontiguousarray(m != 0)


def _wrap(fn: Generator, seed: int) -> Callable[[int], Tuple[np.ndarray, Optional[np.ndarray]]]:
    """The native side's ``call(step)``: ``fn(step, rng)`` with a generator seeded
    from ``(seed, step)`` (so a resumed run gets the same batches), its result
    checked and made contiguous. Errors name the step."""

    def call(step: int) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        rng = np.random.default_rng([seed, step + 1])
        out = fn(step, rng)
        tokens, mask = out if isinstance(out, tuple) else (out, None)
        at = "held-out batch (step -1)" if step < 0 else f"step {step}"
        t = _ids(tokens, f"generator, {at}: tokens", rank=(2,))
        m = None if mask is None else _mask(mask, f"generator, {at}: mask", t.shape)
        return t, m

    return call


def _patterns(fns: Mapping[str, PatternFn]) -> Callable[[np.ndarray], List[Tuple[str, np.ndarray]]]:
    """The native side's ``call(x)``: each named function on each held-out
    window's tokens ``x[i]`` (``[T]``), stacked to ``[n, T, T]`` float64 and
    checked. Errors name the pattern and the window."""
    for name, fn in fns.items():
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise ConfigError(f"patterns: {name!r}: a pattern's name is letters, digits and _ (a Python identifier)")
        if not callable(fn):
            raise TypeError(f"patterns[{name!r}]: expected a function of a window's tokens, got {type(fn).__name__}")

    def call(x: np.ndarray) -> List[Tuple[str, np.ndarray]]:
        n, t = x.shape
        out = []
        for name, fn in fns.items():
            stack = np.empty((n, t, t))
            for i in range(n):
                p = np.asarray(fn(x[i].copy()))
                if p.shape != (t, t):
                    raise ConfigError(f"patterns[{name!r}], held-out window {i}: shape {p.shape}, expected [T, T] = ({t}, {t})")
                if p.dtype.kind not in "biuf" or not np.isfinite(p).all():
                    raise ConfigError(f"patterns[{name!r}], held-out window {i}: a pattern is finite numbers (dtype {p.dtype})")
                stack[i] = p
            out.append((name, stack))
        return out

    return call


def train(
    config: Union[None, str, "os.PathLike[str]", Mapping[str, Any]] = None,
    *,
    tokens: Any = None,
    loss_mask: Any = None,
    heldout: Any = None,
    heldout_mask: Any = None,
    generator: Optional[Generator] = None,
    patterns: Optional[Mapping[str, PatternFn]] = None,
    init_from: Optional[PathLike] = None,
    seed: Optional[int] = None,
    overrides: Optional[Dict[str, Any]] = None,
    out: Optional[PathLike] = None,
    quiet: Optional[bool] = None,
) -> Run:
    """Trains the general transformer (the ``transformer`` experiment) and
    returns the run.

    ``config`` is a dict of keys (nested, ``{"model": {"n_layers": 2}}``, or
    dotted, ``{"model.n_layers": 2}``) laid over the ``transformer`` preset, or
    a preset name or TOML file. The data is, in this order of precedence:

    - ``tokens``: an integer array of ``[N, L]`` windows or a flat ``[N]`` stream
      (then ``data.seq_len`` says how long a window is), with an optional
      ``loss_mask`` of the same shape (nonzero: a token to predict) and optional
      ``heldout`` / ``heldout_mask`` (else the last ``data.heldout_frac`` of
      ``tokens``). The arrays are stored in the run's ``inputs/`` folder, so
      ``mechlab resume`` continues the run from the command line too.
    - ``generator``: ``fn(step, rng) -> tokens`` or ``(tokens, mask)``, called
      for every update with a ``numpy.random.Generator`` seeded from the run's
      seed and the step, and once with ``step = -1`` for the held-out windows.
      It must be a pure function of its arguments (no state of its own), so a
      resumed run gets the same batches: resume with ``mechlab.resume(run,
      generator=fn)``. ``model.d_vocab`` must be set.
    - neither: the config's ``data.file`` or built-in ``data.task``.

    ``patterns``: ``{name: fn}``, detection patterns of your own, where
    ``fn(tokens)`` takes one held-out window's input tokens (``[T]``) and
    returns a ``[T, T]`` array (query rows, key columns, like TransformerLens's
    built-in patterns). Each is evaluated once on the held-out windows, stored
    in the run's ``inputs/`` folder, and every head is scored against it at
    every probe step (``custom_{name}.l{l}.h{h}`` in the metrics, a heads x
    steps figure in the report).

    ``init_from``: a TransformerLens or nanoGPT export folder (``model.safetensors``
    and ``config.json``, as ``Run.export_transformer_lens`` / ``export_nanogpt``
    write them) to start
    from instead of a fresh initialisation; its sizes become the ``model`` keys.
    With ``{"train.steps": 0}`` the run only measures the imported model.
    """
    if config is None:
        src, base = "transformer", {}
    elif isinstance(config, Mapping):
        src, base = "transformer", _flatten(config)
    elif isinstance(config, (str, os.PathLike)):
        src, base = os.fspath(config), {}
    else:
        raise TypeError(f"config: expected a dict of keys, a preset name or a path, got {type(config).__name__}")
    imported: Dict[str, Any] = {}
    if init_from is not None:
        folder = Path(os.fspath(init_from))
        try:
            tl = json.loads((folder / "config.json").read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"init_from: {folder / 'config.json'}: {e}") from None
        if "n_layer" in tl:  # nanoGPT's GPTConfig
            d, h = int(tl["n_embd"]), int(tl["n_head"])
            imported = {
                "model.n_layers": tl["n_layer"], "model.d_model": d, "model.n_heads": h, "model.d_head": d // h,
                "model.d_mlp": 4 * d, "model.attn_only": False, "model.act_fn": "gelu", "model.normalization": "LN",
                "model.n_ctx": tl["block_size"], "model.d_vocab": tl["vocab_size"], "model.tied_embeddings": True,
                "model.unembed_bias": False,
            }
        else:  # TransformerLens's HookedTransformerConfig
            imported = {
                f"model.{k}": tl[k] for k in ("n_layers", "d_model", "n_heads", "d_head", "n_ctx", "d_vocab") if k in tl
            }
            imported["model.attn_only"] = bool(tl.get("attn_only", False))
            imported["model.d_mlp"] = 0 if imported["model.attn_only"] else tl.get("d_mlp") or 0
            if tl.get("act_fn") is not None:
                imported["model.act_fn"] = tl["act_fn"]
            imported["model.normalization"] = "LN" if tl.get("normalization_type") == "LN" else "none"
        imported["model.init_from"] = str(folder.resolve())
    ov: Dict[str, Any] = {**imported, **base, **(_overrides(overrides) or {})}
    if tokens is not None and generator is not None:
        raise ConfigError("train: give tokens or generator, not both")
    arrays: Dict[str, np.ndarray] = {}
    if tokens is not None:
        t = _ids(tokens, "tokens")
        arrays["tokens"] = t
        if loss_mask is not None:
            arrays["loss_mask"] = _mask(loss_mask, "loss_mask", t.shape)
        if heldout is not None:
            h = _ids(heldout, "heldout")
            arrays["heldout"] = h
            if heldout_mask is not None:
                arrays["heldout_mask"] = _mask(heldout_mask, "heldout_mask", h.shape)
        elif heldout_mask is not None:
            raise ConfigError("heldout_mask: given without heldout")
        ov["data.inputs"] = "arrays"
    else:
        for name, v in (("loss_mask", loss_mask), ("heldout", heldout), ("heldout_mask", heldout_mask)):
            if v is not None:
                raise ConfigError(f"{name}: given without tokens")
    call = None
    seed_v = None if seed is None else _seed(seed)
    if generator is not None:
        if not callable(generator):
            raise TypeError(f"generator: expected a function fn(step, rng), got {type(generator).__name__}")
        ov["data.inputs"] = "generator"
    pcall = None
    if patterns is not None:
        if not isinstance(patterns, Mapping):
            raise TypeError(f"patterns: expected a dict {{name: fn}}, got {type(patterns).__name__}")
        pcall = _patterns(patterns)
        ov["probe.pattern_fns"] = list(patterns)
    out_p = _path(out, "out")
    d = Path(_native.run_dir(src, seed=seed_v, overrides=ov, out=out_p))
    if (d / "config.toml").exists():
        raise ConfigError(f"{d}: already holds a run (use mechlab.resume or another out)")
    if generator is not None:
        run_seed = int(_native_config_seed(src, ov, seed_v))
        call = _wrap(generator, run_seed)
    if arrays:
        (d / INPUTS).mkdir(parents=True, exist_ok=True)
        for name, a in arrays.items():
            np.save(d / INPUTS / f"{name}.npy", a)
    cmd = _call("train", src, seed=seed_v, overrides=ov or None, out=d)
    with bar(quiet, src, "step", phases=True) as cb:
        done = _native.run(src, seed=seed_v, overrides=ov, out=d, command=cmd, on_progress=cb, generator=call, patterns=pcall)
    return Run(done)


def _native_config_seed(src: str, ov: Dict[str, Any], seed: Optional[int]) -> int:
    return json.loads(_native.config_json(src, ov, seed))["seed"]


def resume_generator(run_dir: PathLike, generator: Generator) -> Callable[[int], Tuple[np.ndarray, Optional[np.ndarray]]]:
    """The native call for resuming a generator run (its seed from the run's config)."""
    cfg = json.loads(_native.read_config_json(Path(run_dir)))
    return _wrap(generator, int(cfg["seed"]))
