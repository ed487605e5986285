#!/usr/bin/env bash
# Whole training epochs of the topic presets: mechlab vs our PyTorch reference of
# the authors' computation, both on 2 threads, f32, batch 40, same data, same order,
# same initial parameters; checks the first five losses agree, prints the ratios.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
PY="$py"
OUT=${BENCH_OUT:-$(mktemp -d)}
describe_machine
"$(build_example bench_topic)" "$OUT" "$@"
PRESETS=("$@")
[ ${#PRESETS[@]} -eq 0 ] && PRESETS=(topic-value topic-embedding topic-attention topic-two-stage)
printf "\n%-18s %10s %10s %8s %12s %14s\n" preset mechlab_s torch_s ratio max_rel_loss pct_of_peak
for p in "${PRESETS[@]}"; do
  "$PY" bench/topic/torch_topic.py "$OUT/$p" > "$OUT/$p/torch.json"
  "$PY" - "$OUT/$p" <<'PYEOF'
import json, sys
d = sys.argv[1]
m = json.load(open(f"{d}/meta.json")); t = json.load(open(f"{d}/torch.json"))
ok = t["max_rel_loss_diff"] < 1e-3
print(f'{m["preset"]:<18} {m["epoch_seconds"]:10.3f} {t["torch_epoch_seconds"]:10.3f} {t["torch_epoch_seconds"]/m["epoch_seconds"]:7.1f}x {t["max_rel_loss_diff"]:12.2e} {100*m["gflops"]/m["peak_gflops"]:13.1f}%' + ("" if ok else "  LOSSES DIFFER"))
if not ok:
    sys.exit(1)
PYEOF
done
load_after
