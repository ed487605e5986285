#!/usr/bin/env bash
# mechlab's BERT encoder vs transformers.BertModel on the same folder: largest
# differences of hidden states and attention probabilities on Wikipedia first
# sentences, tokenizer agreement, and forward throughput on the topic-bert
# preset's text, both on 2 threads.
#   bench/bert/run.sh [MODEL_DIR] [N_SENTENCES] [N_DOCS]
#   GOLDEN=crates/engine/tests/data/bert_minilm_golden.safetensors bench/bert/run.sh   (rewrites the golden file)
set -euo pipefail
source "$(dirname "$0")/../common.sh"
if ! "$py" -c "import transformers" 2>/dev/null; then
  nice -n 10 "$py" -m pip install -q transformers
fi
OUT=${BENCH_OUT:-$(mktemp -d)}
"$(build_example bench_bert)" "$OUT" "${1:-../shared/models/all-MiniLM-L6-v2}" "${2:-300}" "${3:-300}"
"$py" bench/bert/compare.py "$OUT" ${GOLDEN:+--golden "$GOLDEN"}
