#!/usr/bin/env bash
# Times one normalised-GD step (forward, gradient, update) of the attention-svm
# model f(X) = vᵀXᵀsoftmax(XWz) on the logistic loss, f64, in both parameterisations
# (W, and W = K Qᵀ), in mechlab and in our own PyTorch script, both on 2 threads,
# at the preset's sizes (n = 6, T = 8, d = 10) and at a larger one (n = 1000, T = 32,
# d = 64, d at its cap); checks that both compute the same losses over the first
# three steps from the same data and initial parameters, and prints the ratios.
# Run from anywhere: bench/attention_svm/run.sh [rust_steps_small] [rust_steps_large]
set -euo pipefail
source "$(dirname "$0")/../common.sh"
small="${1:-20000}"
large="${2:-200}"
bin="$(build_example bench_attention_svm)"
describe_machine
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for size in "6 8 10 $small" "1000 32 64 $large"; do
  set -- $size
  mkdir -p "$tmp/$1"
  echo "== n = $1, T = $2, d = $3"
  "$bin" "$1" "$2" "$3" "$4" "$tmp/$1" | tee "$tmp/$1/rust.txt"
  "$py" bench/attention_svm/torch_svm.py "$tmp/$1" "$1" "$2" "$3" "$(( $4 / 10 > 10 ? $4 / 10 : 10 ))" | tee "$tmp/$1/torch.txt"
  "$py" - "$tmp/$1/rust.txt" "$tmp/$1/torch.txt" "$1 $2 $3" <<'PY'
import sys
def read(p):
    loss, per, share = {}, {}, {}
    for line in open(p):
        w = line.split()
        if w[1] == "step": loss.setdefault(w[0], []).append(float(w[4]))
        if w[1] == "threads": per[w[0]] = float(w[4])
        if w[1] == "flops_per_step": share[w[0]] = (float(w[2]), float(w[4]), float(w[6]))
    return loss, per, share
(lr, tr, share), (lt, tt, _) = read(sys.argv[1]), read(sys.argv[2])
for k in ("w", "kq"):
    err = max(abs(a - b) for a, b in zip(lr[k], lt[k]))
    print(f"{k}: max |loss difference| over the first 3 steps: {err:.2e}")
    assert len(lr[k]) == len(lt[k]) == 3 and err < 1e-12, "mechlab and PyTorch disagree"
    print(f"{k} (n, T, d = {sys.argv[3]}): mechlab {tr[k]*1e3:.4f} ms/step, "
          f"PyTorch {tt[k]*1e3:.4f} ms/step, ratio {tt[k]/tr[k]:.1f}x; mechlab "
          f"{share[k][0] / tr[k] / 1e9:.2f} GFLOP/s, {share[k][2]:.1f}% of the measured f64 matmul peak ({share[k][1]:.1f} GFLOP/s)")
PY
done
load_after
