"""The induction circuit of ``lm-induction-repeated`` traced with mechlab's
causal tools: which heads matter (activation patching), which path carries
their input (path patching), how far attribution patching agrees. Prints the
numbers docs/patching.md quotes and, with ``--figures DIR``, draws its figures.

    python bench/patching/circuit.py [--run DIR] [--figures docs/images]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import mechlab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="an lm-induction-repeated run (trained when missing)")
    ap.add_argument("--figures", type=Path)
    args = ap.parse_args()
    run_dir = args.run or Path("runs/lm-induction-repeated-circuit")
    run = mechlab.load(run_dir) if (run_dir / "summary.json").exists() else mechlab.run("lm-induction-repeated", out=run_dir)
    m = run.model()
    rng = np.random.default_rng(0)
    seg = rng.integers(0, 64, size=(16, 32))
    clean = np.concatenate([seg, seg], 1)
    corrupted = clean.copy()
    corrupted[:, 0:32:2] = rng.integers(0, 64, size=(16, 16))  # new predecessors, same attended tokens
    metric = mechlab.Loss(clean, positions=32 + np.arange(0, 31, 2))
    t0 = time.perf_counter()
    heads = m.patch(clean, corrupted, metric, kind="head_out")
    t1 = time.perf_counter()
    by_pos = m.patch(clean, corrupted, metric, kind="head_out_by_pos")
    t2 = time.perf_counter()
    est = m.attribute(clean, corrupted, metric, kind="head_out")
    est_pos = m.attribute(clean, corrupted, metric, kind="head_out_by_pos")
    t3 = time.perf_counter()
    print(f"loss on the predicted positions: clean {heads.clean:.3f}, corrupted {heads.corrupted:.3f}")
    print("head patching [layer, head]:\n", heads.values.round(3))
    print("attribution   [layer, head]:\n", est.values.round(3))
    r_heads = np.corrcoef(heads.values.ravel(), est.values.ravel())[0, 1]
    r_pos = np.corrcoef(by_pos.values.ravel(), est_pos.values.ravel())[0, 1]
    print(f"correlation, heads: {r_heads:.3f}; heads x positions: {r_pos:.3f}")
    print(f"time: head sweep {t1 - t0:.2f} s, head x position sweep {t2 - t1:.2f} s, both attributions {t3 - t2:.2f} s")
    ind = [h for h in range(4) if heads.values[1, h] > 0.2]
    z = m.run_with_cache(clean, "blocks.1.attn.hook_z")[1]["blocks.1.attn.hook_z"].astype(np.float64)
    both = m.run_with_hooks(corrupted, [mechlab.Hook("blocks.1.attn.hook_z", z, heads=ind)])
    effect = (metric(both) - heads.corrupted) / (heads.clean - heads.corrupted)
    print(f"induction heads L1H{ind}: patched together {effect:.3f}")
    senders = [(0, h) for h in range(4)]
    paths = {w: m.path_patch(clean, corrupted, metric, senders, [(1, h, w) for h in ind]) for w in "qkv"}
    paths["logits"] = m.path_patch(clean, corrupted, metric, senders, "logits")
    single = [m.path_patch(clean, corrupted, metric, [(0, h)], [(1, i, "k") for i in ind]) for h in range(4)]
    print("path patching, layer 0 ->", {k: round(v, 3) for k, v in paths.items()})
    print("one layer-0 head -> the induction heads' keys:", [round(v, 3) for v in single])
    if args.figures:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 3, figsize=(13, 3.4))
        im = ax[0].imshow(heads.values, cmap="RdBu", vmin=-1, vmax=1)
        ax[0].set_title("activation patching, head outputs")
        ax[0].set_xlabel("head")
        ax[0].set_ylabel("layer")
        ax[0].set_xticks(range(heads.values.shape[1]))
        ax[0].set_yticks(range(heads.values.shape[0]))
        fig.colorbar(im, ax=ax[0], shrink=0.8)
        names = ["q", "k", "v", "logits"]
        ax[1].bar(names, [paths[n] for n in names], color=["#999", "#0b5cad", "#999", "#999"])
        ax[1].axhline(effect, ls="--", c="k", lw=1)
        ax[1].set_title("path patching from layer 0 into\nthe induction heads (dashed: their whole effect)")
        ax[1].set_ylim(-0.1, 1.05)
        ax[2].scatter(by_pos.values.ravel(), est_pos.values.ravel(), s=8)
        lim = [min(by_pos.values.min(), est_pos.values.min()), max(by_pos.values.max(), est_pos.values.max())]
        ax[2].plot(lim, lim, c="k", lw=0.8)
        ax[2].set_xlabel("activation patching (head x position)")
        ax[2].set_ylabel("attribution patching")
        ax[2].set_title(f"attribution vs patching, r = {r_pos:.3f}")
        fig.tight_layout()
        out = args.figures / "patching_induction_circuit.png"
        fig.savefig(out, dpi=110)
        print("figure:", out)


if __name__ == "__main__":
    main()
