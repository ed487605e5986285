#!/usr/bin/env bash
# mechlab's BERT encoder vs transformers.BertModel on the same folder: largest
# differences of hidden states and attention probabilities on Wikipedia first
# sentences and tokenizer agreement (compare.py), then forward throughput on the
# topic-bert preset's text, 2 threads each: ROUNDS rounds of mechlab, BertModel
# with eager attention and with SDPA, interleaved, each a warm-up and a timed pass
# in a fresh process; medians, spread, ratios and the share of the measured f32
# matrix-product peak.
#   bench/bert/run.sh [MODEL_DIR] [N_SENTENCES] [N_DOCS]      (ROUNDS=5 by default)
#   GOLDEN=crates/engine/tests/data/bert_minilm_golden.safetensors bench/bert/run.sh   (rewrites the golden file)
set -euo pipefail
source "$(dirname "$0")/../common.sh"
if ! "$py" -c "import transformers" 2>/dev/null; then
  nice -n 10 "$py" -m pip install -q transformers
fi
if [ -n "${BENCH_OUT:-}" ]; then OUT=$BENCH_OUT; else OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT; fi
bin="$(build_example bench_bert)"
describe_machine
"$bin" "$OUT" "${1:-../shared/models/all-MiniLM-L6-v2}" "${2:-300}" "${3:-300}"
"$py" bench/bert/compare.py "$OUT" ${GOLDEN:+--golden "$GOLDEN"}
: > "$OUT/speed.jsonl"
for r in $(seq "${ROUNDS:-5}"); do
  echo "{\"who\": \"mechlab\", \"r\": $(${bin} --speed "$OUT")}" >> "$OUT/speed.jsonl"
  for impl in eager sdpa; do
    echo "{\"who\": \"torch-$impl\", \"r\": $("$py" bench/bert/speed.py "$OUT" "$impl")}" >> "$OUT/speed.jsonl"
  done
done
"$py" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
meta = json.load(open(f"{out}/meta.json"))
runs = [json.loads(l) for l in open(f"{out}/speed.jsonl")]
secs = {w: [x["r"]["seconds"] for x in runs if x["who"] == w] for w in ["mechlab", "torch-eager", "torch-sdpa"]}
# the best gemm rate of the sitting: measured before the rounds and after each mechlab pass
peaks = [meta["peak_gflops"]] + [x["r"]["peak_gflops"] for x in runs if x["who"] == "mechlab"]
tok, flops, peak = meta["speed_tokens"], meta["speed_flops"], max(peaks)
print(f"speed on {tok} tokens, {len(secs['mechlab'])} interleaved rounds, 2 threads; "
      f"measured f32 peak {peak:.1f} GFLOP/s, the best of {len(peaks)} measurements "
      f"({min(peaks):.1f} to {peak:.1f}; gemm {meta['gemm_kernel']})")
for w, s in secs.items():
    tps = [tok / x for x in s]
    print(f"  {w:<12} median {statistics.median(tps):6.0f} tok/s (min {min(tps):.0f}, max {max(tps):.0f}), "
          f"{100 * flops / statistics.median(s) / 1e9 / peak:4.1f}% of peak")
for w in ["torch-eager", "torch-sdpa"]:
    ratios = [t / m for t, m in zip(secs[w], secs["mechlab"])]
    print(f"  mechlab / {w}: median {statistics.median(ratios):.2f}x (per round {min(ratios):.2f} to {max(ratios):.2f})")
PY
load_after
