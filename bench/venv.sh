#!/usr/bin/env bash
# Makes bench/.venv with PyTorch from PyPI, for the benchmarks that compare
# against it. CI never needs this. Usage: bench/venv.sh  (idempotent)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -x "$here/.venv/bin/python" ]; then
  python3 -m venv "$here/.venv"
fi
"$here/.venv/bin/python" -m pip install -q --upgrade pip
"$here/.venv/bin/python" -m pip install -q torch numpy
"$here/.venv/bin/python" -c "import torch; print('torch', torch.__version__, 'threads', torch.get_num_threads())"
