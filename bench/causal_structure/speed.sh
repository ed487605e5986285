#!/usr/bin/env bash
# Times one training step of Nichani, Damian & Lee's CatFormer in the preset
# setting (S 10, T 20, batch 256 fresh sequences drawn in the step, SGD) in
# mechlab and in the port of their training (authors_port.py, PyTorch float32),
# interleaved A B A B, on 1 and on 2 threads each. A step's time is the
# difference of a LONG- and a SHORT-step run divided by the difference in steps,
# so the evaluation and start-up costs cancel. Prints each time and the ratio.
# Run from anywhere: bench/causal_structure/speed.sh [rounds] [short] [long]
set -euo pipefail
source "$(dirname "$0")/../common.sh"
rounds="${1:-2}"; short="${2:-500}"; long="${3:-1500}"
cargo build --release -q -p mechlab >&2
bin="$target/release/mechlab"
describe_machine
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
ours() { # threads steps
  RAYON_NUM_THREADS=$1 secs "$bin" --quiet run causal-structure-chain --out "$tmp/m$1-$2" \
    --set train.steps="$2" --set run.probe_every=1000000 --set data.eval_seqs=1024 \
    --set probe.mi_pis=1 --set probe.start_seqs=256
  rm -rf "$tmp/m$1-$2"
}
theirs() { # threads steps
  PORT_THREADS=$1 secs "$py" bench/causal_structure/authors_port.py --problem chain \
    --batch 256 --lr 8 --steps "$2" --n-eval 1024 --n-probe 256 --n-log 1 \
    --mi-pis 0 --reduced-beta 0 --early-steps 0
}
for th in 1 2; do
  m=(); p=()
  for _ in $(seq "$rounds"); do
    m+=("$(echo "($(ours "$th" "$long") - $(ours "$th" "$short")) / ($long - $short) * 1000" | bc -l)")
    p+=("$(echo "($(theirs "$th" "$long") - $(theirs "$th" "$short")) / ($long - $short) * 1000" | bc -l)")
  done
  "$py" - "$th" "${m[*]}" "${p[*]}" <<'PY'
import sys
th, m, p = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
print(f"{th} thread(s): mechlab {min(m):.3f}-{max(m):.3f} ms/step, the port {min(p):.2f}-{max(p):.2f} ms/step, "
      f"ratio {min(p)/max(m):.1f}-{max(p)/min(m):.1f}x (best of each: {min(p)/min(m):.1f}x)")
PY
done
load_after
