#!/usr/bin/env bash
# What a run costs from Python against the same run from the CLI: the same preset
# and overrides, release builds of both, interleaved repetitions (so load on the
# machine hits both alike). Prints each repetition, the medians and the ratio.
# Usage: bench/python/run.sh [steps] [repetitions]   (defaults 2000, 5)
# Environment: CARGO_TARGET_DIR, CARGO_LOCK as for the other benches; PYTHON, a
# Python to make the package's venv with (default python3).
set -euo pipefail
PYTHON="${PYTHON:-$(command -v python3)}"  # no PyTorch needed here
source "$(dirname "$0")/../common.sh"     # describe_machine, load_after
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
steps="${1:-2000}"
reps="${2:-5}"
target="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TARGET_DIR="$target" RAYON_NUM_THREADS=2
lock=(${CARGO_LOCK:+flock "$CARGO_LOCK"})

"${lock[@]}" cargo build --release -q -p mechlab --bin mechlab
describe_machine
venv="$root/bench/.venv-python"
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin numpy
# A release wheel, as `pip install ./python` builds it for users (the backend
# finds the maturin installed above on PATH).
PATH="$venv/bin:$PATH" "${lock[@]}" "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    --no-build-isolation --force-reinstall --no-deps ./python

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cli() {
  "$target/release/mechlab" --quiet run induction-simplified \
    --set "train.steps=$steps" --out "$tmp/cli" >/dev/null
}
python_run() {
  "$venv/bin/python" -c "import mechlab, sys; mechlab.run('induction-simplified', overrides={'train.steps': $steps}, out=sys.argv[1])" "$tmp/py"
}
now() { date +%s.%N; }
: >"$tmp/times"
for i in $(seq "$reps"); do
  rm -rf "$tmp/cli" "$tmp/py"
  t0=$(now); cli; t1=$(now); python_run; t2=$(now)
  echo "$i $t0 $t1 $t2" | awk '{printf "rep %d: CLI %.3f s, Python %.3f s\n", $1, $3-$2, $4-$3}'
  echo "$t0 $t1 $t2" >>"$tmp/times"
  cmp -s "$tmp/cli/summary.json" "$tmp/py/summary.json" || { echo "the two runs' summaries differ" >&2; exit 1; }
done
"$venv/bin/python" - "$tmp/times" "$steps" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
cli = [b - a for a, b, _ in rows]
py = [c - b for _, b, c in rows]
mc, mp = statistics.median(cli), statistics.median(py)
print(f"induction-simplified, {sys.argv[2]} steps, {len(rows)} reps (whole process, median): "
      f"CLI {mc:.3f} s, Python {mp:.3f} s, Python/CLI {mp / mc:.3f} "
      f"(min: {min(cli):.3f} vs {min(py):.3f} s, {min(py) / min(cli):.3f})")
PY
load_after
