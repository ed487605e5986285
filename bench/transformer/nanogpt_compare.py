"""mechlab's transformer against karpathy/nanoGPT's `GPT` on the same weights,
both ways: a nanoGPT-shaped mechlab run (LayerNorm, MLPs of 4·d_model, the
exact GELU, tied embeddings, no unembedding bias) exported with
`Run.export_nanogpt` and loaded into nanoGPT's model; and a freshly initialised
nanoGPT model imported with `mechlab.train(init_from=..., train.steps=0)`.
Compares the logits (max |a − b| / max |b|).

nanoGPT is not a package: point the script at a checkout of
karpathy/nanoGPT (its `model.py` is imported from there; nothing of it is
copied here). Needs torch and mechlab; not run in CI. Usage:
    python bench/transformer/nanogpt_compare.py NANOGPT_CHECKOUT [OUT_DIR]
"""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import safetensors.torch
import torch

import mechlab


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    from model import GPT, GPTConfig  # nanoGPT's model.py

    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp())
    torch.set_num_threads(2)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"torch {torch.__version__}, {cpu}")
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 32, size=(4000, 33))
    for row in tokens:
        k = int(rng.integers(8, 17))
        row[k:] = np.resize(row[:k], 33 - k)
    run = mechlab.train(
        {"train.steps": 300, "model": {"d_model": 64, "n_heads": 4, "d_head": 16, "d_mlp": 256, "attn_only": False,
                                       "act_fn": "gelu", "tied_embeddings": True, "unembed_bias": False}},
        tokens=tokens, out=out / "run", quiet=True,
    )
    folder = run.export_nanogpt(out / "nanogpt")
    cfg = json.loads((folder / "config.json").read_text())
    ng = GPT(GPTConfig(**cfg)).eval()
    sd = safetensors.torch.load_file(folder / "model.safetensors")
    missing, unexpected = ng.load_state_dict(sd, strict=False)
    assert not unexpected and all(k.endswith(".attn.bias") for k in missing), (missing, unexpected)
    x = tokens[:16, :32]
    with torch.no_grad():
        theirs, _ = ng(torch.tensor(x), targets=torch.tensor(tokens[:16, 1:33]))  # targets: logits at every position
    ours, _ = run.model().run_with_cache(x, names=[])
    print(f"1. a mechlab run exported to nanoGPT: logits relative difference {rel(ours, theirs.numpy()):.2e}")

    fresh = GPT(GPTConfig(block_size=33, vocab_size=32, n_layer=2, n_head=4, n_embd=48, dropout=0.0, bias=True)).eval()
    with torch.no_grad():
        for p in fresh.parameters():
            p += 0.05 * torch.randn_like(p)
    imp = out / "from_nanogpt"
    imp.mkdir(parents=True, exist_ok=True)
    state = {k: v.clone().contiguous() for k, v in fresh.state_dict().items() if not k.endswith(".attn.bias")}
    safetensors.torch.save_file(state, imp / "model.safetensors")
    (imp / "config.json").write_text(json.dumps(
        {"block_size": 33, "vocab_size": 32, "n_layer": 2, "n_head": 4, "n_embd": 48, "dropout": 0.0, "bias": True}))
    imported = mechlab.train({"train.steps": 0}, tokens=tokens, init_from=imp, out=out / "imported", quiet=True)
    with torch.no_grad():
        theirs, _ = fresh(torch.tensor(x), targets=torch.tensor(tokens[:16, 1:33]))
    ours, _ = imported.model().run_with_cache(x, names=[])
    print(f"2. a nanoGPT model imported into mechlab: logits relative difference {rel(ours, theirs.numpy()):.2e}")


if __name__ == "__main__":
    main()
