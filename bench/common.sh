# Sourced by bench/<paper>/run.sh: the repository root, the PyTorch venv and a
# release build of one bench example. Environment:
#   CARGO_TARGET_DIR  where cargo builds (default: <repo>/target)
#   CARGO_LOCK        a lock file to serialise builds on a shared machine (optional)
#   PYTHON            a Python with torch (default: bench/.venv, made by bench/venv.sh)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-$root/bench/.venv/bin/python}"
if [ ! -x "$py" ]; then
  bash "$root/bench/venv.sh"
  py="$root/bench/.venv/bin/python"
fi
target="${CARGO_TARGET_DIR:-$root/target}"
export RAYON_NUM_THREADS=2 OMP_NUM_THREADS=2 MKL_NUM_THREADS=2

# build_example NAME: builds crates/mechlab/examples/NAME.rs in release; prints its path.
build_example() {
  ${CARGO_LOCK:+flock "$CARGO_LOCK"} cargo build --release -q -p mechlab --example "$1" >&2
  echo "$target/release/examples/$1"
}
