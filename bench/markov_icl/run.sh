#!/usr/bin/env bash
# Times one training step (forward, backward, AdamW update) of the markov-icl model
# in the authors' setting (S = 2, T = 100, batch 64, d_model 16, one head per
# layer, f64) in mechlab and in our own PyTorch script, both on 2 threads, checks
# that both compute the same losses on the same batches from the same initial
# parameters, and prints the ratio. Then the same with the authors' dropout (0.1)
# and weight decay (0.1 on the linear weights): mechlab writes its dropout masks,
# the PyTorch side applies them, and the losses must agree again.
# Run from anywhere: bench/markov_icl/run.sh [steps]
set -euo pipefail
source "$(dirname "$0")/../common.sh"
steps="${1:-200}"
bin="$(build_example bench_markov_icl)"
describe_machine
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for dropout in 0 0.1; do
  dir="$tmp/d$dropout"
  mkdir -p "$dir"
  echo "== dropout $dropout"
  "$bin" "$steps" "$dir" "$dropout" | tee "$dir/rust.txt"
  "$py" bench/markov_icl/torch_rpe.py "$dir" "$(( steps / 4 > 10 ? steps / 4 : 10 ))" | tee "$dir/torch.txt"
  "$py" - "$dir/rust.txt" "$dir/torch.txt" <<'PY'
import sys
def read(p):
    loss, per, share = [], None, None
    for line in open(p):
        w = line.split()
        if w[0] == "step": loss.append(float(w[3]))
        if w[0] == "threads": per = float(w[3])
        if w[0] == "flops_per_step": share = (float(w[1]), float(w[3]), float(w[5]))
    return loss, per, share
(lr, tr, share), (lt, tt, _) = read(sys.argv[1]), read(sys.argv[2])
err = max(abs(a - b) for a, b in zip(lr, lt))
print(f"max |loss difference| over the first 3 steps: {err:.2e}")
assert err < 1e-9, "mechlab and PyTorch disagree"
print(f"mechlab {tr*1e3:.2f} ms/step, PyTorch {tt*1e3:.2f} ms/step, ratio {tt/tr:.1f}x; "
      f"the authors' 2 000 steps: mechlab {2000*tr:.1f} s, PyTorch {2000*tt:.1f} s")
flops, peak, pct = share
print(f"mechlab: {flops / tr / 1e9:.2f} GFLOP/s, {pct:.1f}% of the measured f64 matmul peak ({peak:.1f} GFLOP/s)")
PY
done
load_after
