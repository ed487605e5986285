#!/usr/bin/env bash
# Full-batch step of the token-selection model on IMDB-sized data (25 000 reviews,
# T = 256, vocabulary 20 000, d = 256, f32): mechlab (Rust) against our PyTorch
# implementation, both on 2 threads, same data and parameters; checks they compute
# the same loss and gradient norms, then prints the times and the ratio.
# Usage: bench/selection/run.sh [n T vocab d]   (from anywhere)
set -euo pipefail
source "$(dirname "$0")/../common.sh"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
bin="$(build_example bench_selection)"
describe_machine
"$bin" "$out" "$@" >/dev/null
"$py" bench/selection/torch_step.py "$out" 5 >/dev/null
"$py" - "$out" <<'PY'
import json, sys
out = sys.argv[1]
r = json.load(open(f"{out}/rust.json")); t = json.load(open(f"{out}/torch.json"))
print(f"data: n={r['n']} T={r['T']} vocab={r['vocab']} d={r['d']}, f32, {r['threads']} threads")
ref = t.pop("reference_f64")
ok = True
for k in ["loss", "grad_norm_E", "grad_norm_p", "grad_norm_v"]:
    rel = lambda x: abs(x - ref[k]) / max(abs(ref[k]), 1e-30)
    ok &= rel(r[k]) < 1e-4
    line = f"  {k:12s} f64 reference {ref[k]:.7e} | mechlab f32 rel err {rel(r[k]):.1e}"
    for name in t:
        ok &= rel(t[name][k]) < 1e-2
        line += f" | torch-{name} f32 rel err {rel(t[name][k]):.1e}"
    print(line)
sh = r["share"].split()
print(f"mechlab          {r['median_s']*1e3:9.1f} ms / step (median), {float(sh[1]) / r['median_s'] / 1e9:.2f} GFLOP/s "
      f"= {float(sh[5]):.1f}% of the measured f32 matmul peak ({float(sh[3]):.1f} GFLOP/s)")
for name in t:
    print(f"torch {name:10s} {t[name]['median_s']*1e3:9.1f} ms / step  -> mechlab is {t[name]['median_s']/r['median_s']:.1f}x faster")
if not ok:
    sys.exit("results differ from the float64 reference beyond tolerance (mechlab 1e-4, torch 1e-2)")
PY
load_after
