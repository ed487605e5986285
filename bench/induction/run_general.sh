#!/usr/bin/env bash
# The general (direct, table-free) induction path at S = 10, L = 100, H = 3, D = 2,
# full batch of 9 000 sequences, code loss, f64, SGD lr 1: mechlab
# (examples/bench_induction_general.rs) against our PyTorch script of the same
# model (torch_simplified.py with S = 10), both on 2 threads; checks that both give
# the same losses over the first 3 epochs on the same tokens, prints the ratio.
# Run from anywhere: bench/induction/run_general.sh [epochs] [S]
set -euo pipefail
source "$(dirname "$0")/../common.sh"
epochs="${1:-30}"
vocab="${2:-10}"
bin="$(build_example bench_induction_general)"
describe_machine
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin" "$epochs" "$tmp/tokens.u8" "$vocab" | tee "$tmp/rust.txt"
"$py" bench/induction/torch_simplified.py "$tmp/tokens.u8" "$(( epochs / 10 > 3 ? epochs / 10 : 3 ))" "$vocab" | tee "$tmp/torch.txt"
"$py" - "$tmp/rust.txt" "$tmp/torch.txt" "$vocab" <<'PY'
import sys
def read(p):
    loss, per, share = [], None, None
    for line in open(p):
        w = line.split()
        if w[0] == "epoch": loss.append(float(w[3]))
        if w[0] == "threads": per = float(w[3])
        if w[0] == "flops_per_step": share = (float(w[1]), float(w[3]), float(w[5]))
    return loss, per, share
(lr, tr, share), (lt, tt, _) = read(sys.argv[1]), read(sys.argv[2])
err = max(abs(a - b) for a, b in zip(lr, lt))
print(f"S = {sys.argv[3]}: max |loss difference| over the first 3 epochs: {err:.2e}")
assert err < 1e-9, "mechlab and PyTorch disagree"
print(f"general path: mechlab {tr*1e3:.2f} ms/epoch, PyTorch {tt*1e3:.1f} ms/epoch, ratio {tt/tr:.1f}x")
flops, peak, pct = share
print(f"mechlab: {flops / tr / 1e9:.2f} GFLOP/s of model FLOPs ({flops:.3g} an epoch), "
      f"{pct:.1f}% of the measured f64 matmul peak ({peak:.1f} GFLOP/s)")
PY
load_after
