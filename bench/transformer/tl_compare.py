"""mechlab's transformer against TransformerLens on the same weights, both ways.

1. Trains a small model with mechlab (`mechlab.train`, f32, two layers with
   GELU MLPs, on repeated random segments made in numpy, with 64 held-out
   windows given), exports it (`Run.export_transformer_lens`) and loads it into
   TransformerLens's `HookedTransformer`; compares the logits and every cached
   activation on the held-out windows (max |a − b| / max |b| per hook).
2. Scores TransformerLens's own head detectors
   (`transformer_lens.head_detector`: its detection patterns and
   `compute_head_attention_similarity_score`, "mul", averaged over the windows)
   and composition scores (`all_composition_scores`) on the same weights and
   windows, beside the numbers mechlab's probe logged at the run's last step.
3. Imports a freshly initialised TransformerLens model into mechlab
   (`mechlab.train(init_from=..., train.steps=0)`) and compares the logits.

Needs a virtual environment with torch, transformer_lens and mechlab
(`pip install torch transformer_lens ./python`); not run in CI. Usage:
    python bench/transformer/tl_compare.py [OUT_DIR]
"""

import json
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np
import safetensors.torch
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens import head_detector as hd

import mechlab


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def load_tl(folder: Path) -> HookedTransformer:
    cfg = HookedTransformerConfig(**json.loads((folder / "config.json").read_text()))
    model = HookedTransformer(cfg)
    missing, unexpected = model.load_state_dict(safetensors.torch.load_file(folder / "model.safetensors"), strict=False)
    # TransformerLens's buffers (the causal mask, IGNORE) are its own
    assert all(k.endswith(("attn.mask", "attn.IGNORE")) for k in missing), missing
    assert not unexpected, unexpected
    return model.eval()


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    torch.set_num_threads(2)
    import importlib.metadata as md  # noqa: PLC0415
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    print(f"torch {torch.__version__}, transformer_lens {md.version('transformer_lens')}, {cpu}")
    rng = np.random.default_rng(0)

    def repeats(n: int) -> np.ndarray:
        x = rng.integers(0, 32, size=(n, 33))
        for row in x:
            k = int(rng.integers(8, 17))
            row[k:] = np.resize(row[:k], 33 - k)
        return x

    held = repeats(64)
    run = mechlab.train(
        {"model": {"d_mlp": 128, "attn_only": False}, "train.steps": 600},
        tokens=repeats(20_000), heldout=held, out=out / "run", quiet=True,
    )
    exp = run.export_transformer_lens(out / "tl")
    tl = load_tl(exp)
    probe = run.metrics("probe").iloc[-1]  # mechlab's numbers at the last step
    model = run.model()
    tokens = held[:, :32]  # the probe's inputs
    ours, cache = model.run_with_cache(tokens)
    theirs, tcache = tl.run_with_cache(torch.tensor(tokens))
    rows = [("logits", rel(ours, theirs.detach().numpy()))]
    for name in cache:
        if name in tcache:
            rows.append((name, rel(cache[name], tcache[name].detach().numpy())))
    worst = max(r for _, r in rows)
    print(f"1. {len(rows) - 1} hook points + logits on {tokens.shape}: largest relative difference {worst:.2e}")
    for name, r in rows:
        print(f"   {name:34s} {r:.2e}")

    # 2. TransformerLens's detectors and composition scores on the same weights
    pats = {
        "previous_token": hd.get_previous_token_head_detection_pattern,
        "duplicate_token": hd.get_duplicate_token_head_detection_pattern,
        "induction": hd.get_induction_head_detection_pattern,
    }
    print("2. detector scores on the held-out windows, TransformerLens's functions vs mechlab's probe (logged):")
    for key, make in pats.items():
        worst_d = 0.0
        for layer in range(tl.cfg.n_layers):
            for head in range(tl.cfg.n_heads):
                tls = []
                for s in range(tokens.shape[0]):
                    det = make(torch.tensor(tokens[s])).float()
                    p = tcache["pattern", layer][s, head]
                    tls.append(hd.compute_head_attention_similarity_score(
                        p.clone(), det, exclude_bos=False, exclude_current_token=False, error_measure="mul"))
                worst_d = max(worst_d, abs(np.mean(tls) - probe[f"{key}.l{layer}.h{head}"]))
        print(f"   {key:16s} largest |TL − mechlab| over heads: {worst_d:.2e}")
    for mode in ["Q", "K", "V"]:
        sc = tl.all_composition_scores(mode).detach().numpy()  # [L, H, L, H]
        worst_c = 0.0
        for a in range(tl.cfg.n_heads):
            for b in range(tl.cfg.n_heads):
                logged = probe[f"comp_{mode.lower()}.l0h{a}.l1h{b}"]
                worst_c = max(worst_c, abs(sc[0, a, 1, b] - logged))
        print(f"   {mode}-composition   largest |TL − mechlab logged| over head pairs: {worst_c:.2e}")

    # 3. a TransformerLens model into mechlab
    fresh = HookedTransformer(HookedTransformerConfig(
        n_layers=2, d_model=48, n_ctx=33, d_head=12, n_heads=4, d_mlp=96, d_vocab=32, act_fn="relu",
        normalization_type="LN", seed=3))
    for p in fresh.parameters():  # away from TransformerLens's zero biases
        p.data += 0.05 * torch.randn_like(p)
    folder = out / "from_tl"
    folder.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file({k: v.contiguous() for k, v in fresh.state_dict().items()
                                 if v.dtype.is_floating_point}, folder / "model.safetensors")
    keys = ["n_layers", "d_model", "n_ctx", "d_head", "n_heads", "d_mlp", "d_vocab", "act_fn", "attn_only",
            "normalization_type", "positional_embedding_type"]
    (folder / "config.json").write_text(json.dumps({k: getattr(fresh.cfg, k) for k in keys}))
    imported = mechlab.train({"train.steps": 0}, init_from=folder, out=out / "imported", quiet=True)
    x = tokens[:, :32]
    a, _ = imported.model().run_with_cache(x, names=[])
    b = fresh(torch.tensor(x)).detach().numpy()
    print(f"3. a TransformerLens model (ReLU MLPs) imported into mechlab: logits relative difference {rel(a, b):.2e}")


if __name__ == "__main__":
    main()
