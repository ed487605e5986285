#!/usr/bin/env bash
# This machine's matrix-product peak through gemm (f32, f64; 1 and 2 threads;
# n = 512, 1024, 2048), the denominator of every benchmark's "share of peak".
# Usage: bench/peak/run.sh [OUT.json]
set -euo pipefail
PYTHON="${PYTHON:-$(command -v python3)}"  # no PyTorch needed here
source "$(dirname "$0")/../common.sh"
describe_machine
"$(build_example bench_peak)" "$@"
load_after
