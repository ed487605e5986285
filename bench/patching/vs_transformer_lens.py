"""The cost of a causal analysis, mechlab against TransformerLens on the same
weights: a head × position activation-patching sweep of ``hook_z``
(TransformerLens's ``patching.get_act_patch_attn_head_out_by_pos``) and
attribution patching of every head and position (one forward on the clean input,
one forward and backward on the corrupted; Nanda 2023's recipe with
TransformerLens's hooks), timed A B A B in one sitting, and the two results
compared. Needs torch and ``transformer_lens<4`` (not CI).

    python bench/patching/vs_transformer_lens.py RUN [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

import mechlab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import safetensors.torch
    import torch
    from transformer_lens import HookedTransformer, HookedTransformerConfig, patching

    run = mechlab.load(args.run)
    m = run.model()
    with tempfile.TemporaryDirectory() as d:
        folder = run.export_transformer_lens(Path(d) / "tl")
        cfg = HookedTransformerConfig(**json.loads((folder / "config.json").read_text()))
        tl = HookedTransformer(cfg)
        tl.load_state_dict(safetensors.torch.load_file(str(folder / "model.safetensors")), strict=False)
    tl.eval()
    rng = np.random.default_rng(0)
    seg = rng.integers(0, m.cfg.d_vocab, size=(16, m.cfg.n_ctx // 2))
    clean = np.concatenate([seg, seg], 1)
    corrupted = clean.copy()
    half = seg.shape[1]
    corrupted[:, 0:half:2] = rng.integers(0, m.cfg.d_vocab, size=(16, (half + 1) // 2))
    positions = half + np.arange(0, half - 1, 2)
    metric = mechlab.Loss(clean, positions=positions)
    tc, tx = torch.tensor(clean), torch.tensor(corrupted)
    pos_t, y_t = torch.tensor(positions), torch.tensor(clean[:, positions + 1])

    def tl_metric(logits: torch.Tensor) -> torch.Tensor:
        lp = logits[:, pos_t].log_softmax(-1)
        return -lp.gather(-1, y_t[..., None]).mean()

    with torch.no_grad():
        clean_l, corr_l = tl_metric(tl(tc)).item(), tl_metric(tl(tx)).item()

    def tl_norm(logits: torch.Tensor) -> torch.Tensor:
        return (tl_metric(logits) - corr_l) / (clean_l - corr_l)

    def tl_sweep() -> np.ndarray:
        with torch.no_grad():
            _, cache = tl.run_with_cache(tc)
            return patching.get_act_patch_attn_head_out_by_pos(tl, tx, cache, tl_norm).numpy()

    names = [f"blocks.{l}.attn.hook_z" for l in range(cfg.n_layers)]

    def tl_attribute() -> np.ndarray:
        with torch.no_grad():
            _, clean_cache = tl.run_with_cache(tc, names_filter=lambda n: n in names)
        acts, grads = {}, {}

        def keep(t: torch.Tensor, hook) -> None:
            acts[hook.name] = t.detach()

        def keep_grad(g: torch.Tensor, hook) -> None:
            grads[hook.name] = g.detach()

        with tl.hooks(fwd_hooks=[(n, keep) for n in names], bwd_hooks=[(n, keep_grad) for n in names]):
            tl_metric(tl(tx)).backward()
        out = [((clean_cache[n] - acts[n]) * grads[n]).sum((0, 3)) for n in names]  # [pos, head]
        return (torch.stack(out) / (clean_l - corr_l)).numpy()

    def ml_sweep() -> np.ndarray:
        return m.patch(clean, corrupted, metric, kind="head_out_by_pos").values

    def ml_attribute() -> np.ndarray:
        return m.attribute(clean, corrupted, metric, kind="head_out_by_pos").values

    times: dict = {k: [] for k in ("tl_sweep", "ml_sweep", "tl_attr", "ml_attr")}
    results = {}
    for _ in range(args.rounds):
        for key, f in (("tl_sweep", tl_sweep), ("ml_sweep", ml_sweep), ("tl_attr", tl_attribute), ("ml_attr", ml_attribute)):
            # each timed call starts with the cores idle: torch's OpenMP and
            # numpy's BLAS threads spin for a while after their last call
            time.sleep(0.5)
            t = time.perf_counter()
            results[key] = f()
            times[key].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    print(f"processor: {cpu}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; torch {torch.__version__} ({torch.get_num_threads()} threads)")
    print(f"model: {cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads; 16 sequences of {clean.shape[1]} tokens")
    print(f"head x position sweep ({cfg.n_layers * clean.shape[1] * cfg.n_heads} patched forwards): "
          f"mechlab {med['ml_sweep']:.2f} s, TransformerLens {med['tl_sweep']:.2f} s, ratio {med['tl_sweep'] / med['ml_sweep']:.2f}x")
    print(f"attribution patching (head x position): mechlab {med['ml_attr'] * 1e3:.1f} ms, "
          f"TransformerLens {med['tl_attr'] * 1e3:.1f} ms, ratio {med['tl_attr'] / med['ml_attr']:.2f}x")
    print(f"agreement: sweep max |diff| {np.abs(results['ml_sweep'] - results['tl_sweep']).max():.2e}, "
          f"attribution max |diff| {np.abs(results['ml_attr'] - results['tl_attr']).max():.2e}")


if __name__ == "__main__":
    main()
