#!/usr/bin/env bash
# Times one full-batch epoch of the simplified induction model (S = 3, L = 100,
# H = 3, D = 2, 9 000 sequences, code loss, SGD lr 1) in mechlab and in our own
# PyTorch script, both on 2 threads, checks that both compute the same losses on
# the same data, and prints the ratio. Run from anywhere: bench/induction/run.sh [epochs]
set -euo pipefail
source "$(dirname "$0")/../common.sh"
epochs="${1:-100}"
bin="$(build_example bench_induction)"
describe_machine
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin" "$epochs" "$tmp/tokens.u8" | tee "$tmp/rust.txt"
"$py" bench/induction/torch_simplified.py "$tmp/tokens.u8" "$(( epochs / 10 > 3 ? epochs / 10 : 3 ))" | tee "$tmp/torch.txt"
"$py" - "$tmp/rust.txt" "$tmp/torch.txt" <<'PY'
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
print(f"max |loss difference| over the first 3 epochs: {err:.2e}")
assert err < 1e-9, "mechlab and PyTorch disagree"
print(f"mechlab {tr*1e3:.2f} ms/epoch, PyTorch {tt*1e3:.1f} ms/epoch, ratio {tt/tr:.1f}x; "
      f"50 000 epochs: mechlab {50000*tr/60:.1f} min, PyTorch {50000*tt/3600:.1f} h")
flops, peak, pct = share
print(f"mechlab: {flops / tr / 1e9:.2f} GFLOP/s of model FLOPs ({flops:.3g} an epoch), "
      f"{pct:.1f}% of the measured f64 matmul peak ({peak:.1f} GFLOP/s)")
PY
load_after
