#!/usr/bin/env bash
# Times one training step of von Oswald et al.'s one-layer linear self-attention
# in the icl-regression-gd preset's setting (d = N = 10, 2 048 fresh prompts drawn
# in the step, Adam with their clip) in mechlab (f64) and in the port of their
# training (authors_port.py --preset vo, PyTorch float32), interleaved A B A B,
# one thread each. A step's time is the difference of a LONG- and a SHORT-step run
# divided by the difference in steps, so evaluation and start-up cancel. Prints
# each round's times and the ratio.
# Run from anywhere: bench/icl_regression/speed.sh [rounds] [short] [long]
set -euo pipefail
source "$(dirname "$0")/../common.sh"
rounds="${1:-3}"; short="${2:-1000}"; long="${3:-3000}"
cargo build --release -q -p mechlab >&2
bin="$target/release/mechlab"
describe_machine
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
ours() { # steps
  RAYON_NUM_THREADS=1 secs "$bin" --quiet run icl-regression-gd --out "$tmp/m$1" \
    --set train.steps="$1" --set run.probe_every=1000000
  rm -rf "$tmp/m$1"
}
theirs() { # steps
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 secs "$py" bench/icl_regression/authors_port.py \
    --preset vo --steps "$1" --every 1000000
}
m=(); p=()
for r in $(seq "$rounds"); do
  m+=("$(echo "($(ours "$long") - $(ours "$short")) / ($long - $short) * 1000" | bc -l)")
  p+=("$(echo "($(theirs "$long") - $(theirs "$short")) / ($long - $short) * 1000" | bc -l)")
  printf 'round %d: mechlab %.3f ms/step, the port %.3f ms/step\n' "$r" "${m[-1]}" "${p[-1]}"
done
"$py" - "${m[*]}" "${p[*]}" <<'PY'
import statistics, sys
m, p = ([float(x) for x in s.split()] for s in sys.argv[1:3])
r = [b / a for a, b in zip(m, p)]
print(f"1 thread: mechlab {statistics.median(m):.2f} ms/step ({min(m):.2f}-{max(m):.2f}), "
      f"the port {statistics.median(p):.2f} ms/step ({min(p):.2f}-{max(p):.2f}), "
      f"ratio by round median {statistics.median(r):.1f}x ({min(r):.1f}-{max(r):.1f})")
PY
load_after
