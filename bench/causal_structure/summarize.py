#!/usr/bin/env python3
"""Mean, sample standard deviation and range over the JSON lines of authors_port.py
(or check_authors_port.py train) runs; null values (fixed-graph probes under --control)
are skipped. usage: summarize.py FILE.jsonl..."""
import json
import sys

import numpy as np

KEYS = ["final_loss", "bayes_loss", "bayes_fixed", "entropy", "uniform_loss",
        "parent_attn", "parent_attn_chance", "parent_attn_pairs", "parent_argmax",
        "parent_attn_pos",
        "induction", "induction_uniform", "a2_ind_diag", "w_copy_diag", "mi_argmax",
        "mi_exact_argmax", "mi_est_exact_rowcorr", "a1_early_mi_rowcorr",
        "a1_early_argmax", "reduced_grad_argmax", "reduced_grad_mi_rowcorr",
        "reduced_grad_mi_est_rowcorr", "train_s", "total_s"]
for f in sys.argv[1:]:
    rows = [json.loads(line) for line in open(f) if line.strip()]
    ctl = sorted({r.get("control", "none") for r in rows})
    print(f"{f}: {len(rows)} runs, seeds {[r['seed'] for r in rows]}, control {ctl}")
    for r in rows:
        if "uniform_loss" in r:
            r["gap_closed"] = (r["uniform_loss"] - r["final_loss"]) / (r["uniform_loss"] - r["bayes_fixed"])
    for k in KEYS[:5] + ["gap_closed"] + KEYS[5:]:
        v = np.array([r[k] for r in rows if r.get(k) is not None], float)  # null: skipped
        if len(v):
            sd = v.std(ddof=1) if len(v) > 1 else 0.0
            print(f"  {k:26s} {v.mean():8.4f} ± {sd:.4f}   [{v.min():.4f}, {v.max():.4f}]")
