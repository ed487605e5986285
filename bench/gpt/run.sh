#!/usr/bin/env bash
# A training step of the general causal transformer (engine::gpt) at
# lm-induction's real-text size (2 layers, d_model 128, 4 heads of 32, T = 256,
# batch 16, f32, AdamW) in mechlab and in PyTorch (the same parameters and
# batches; attention written out, and SDPA), 2 threads each, interleaved
# A B A B; checks the first three losses agree and prints medians, the ratio and
# mechlab's share of the measured matmul peak.
# Usage: bench/gpt/run.sh [steps] [rounds] [d_mlp] [n_layers] [d_model] [mask]
# (defaults 30 3 0 2 128 all; heads of 32; mask "last": the loss on each
# sequence's last position only, the transformer experiment's classification style)
set -euo pipefail
source "$(dirname "$0")/../common.sh"
steps="${1:-30}"; rounds="${2:-3}"; d_mlp="${3:-0}"; layers="${4:-2}"; dm="${5:-128}"; mask="${6:-all}"
bin="$(build_example bench_gpt)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
describe_machine
for r in $(seq "$rounds"); do
  "$bin" "$tmp" "$steps" "$d_mlp" "$layers" "$dm" "$mask" > "$tmp/rust$r.txt"
  "$py" bench/gpt/torch_gpt.py "$tmp" "$tmp/rust$r.txt" > "$tmp/torch$r.txt"
  grep threads "$tmp/rust$r.txt"; cat "$tmp/torch$r.txt"
done
"$py" - "$tmp" "$rounds" <<'PY'
import re, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
ms = lambda pat, f: float(re.search(pat, open(f).read()).group(1))
ours = [ms(r"step ([\d.]+) ms", f"{d}/rust{r}.txt") for r in range(1, n + 1)]
share = [ms(r"share ([\d.]+)%", f"{d}/rust{r}.txt") for r in range(1, n + 1)]
for name in ["eager", "sdpa"]:
    theirs = [ms(rf"torch-{name} step ([\d.]+) ms", f"{d}/torch{r}.txt") for r in range(1, n + 1)]
    ratios = [t / o for t, o in zip(theirs, ours)]
    print(f"vs PyTorch {name}: mechlab {statistics.median(ours):.1f} ms, PyTorch {statistics.median(theirs):.1f} ms, "
          f"ratio median {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})")
print(f"mechlab share of the measured f32 matmul peak: median {statistics.median(share):.1f}%")
# the same median step against the best peak of the sitting: a round whose peak fell
# in a slow minute of the host reads high in the per-round share
peaks = [ms(r"peak ([\d.]+) GFLOP/s", f"{d}/rust{r}.txt") for r in range(1, n + 1)]
flops = ms(r"flops ([\d.e+]+)", f"{d}/rust1.txt")
print(f"against the best peak of the sitting ({max(peaks):.1f} GFLOP/s; {min(peaks):.1f} to {max(peaks):.1f}): "
      f"{100 * flops / (statistics.median(ours) / 1e3) / 1e9 / max(peaks):.1f}%")
PY
load_after
