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

# describe_machine: what the numbers below were measured on, printed first by
# every benchmark: the processor, mechlab's SIMD level and gemm kernel, PyTorch's
# version, backends and threads (when this Python has torch), and the load.
describe_machine() {
  # (a virtual machine's model name can be generic: family and model say more)
  field() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'; }
  echo "processor: $(field 'model name') (family $(field 'cpu family'), model $(field 'model\s')), $(nproc) cores"
  echo "mechlab: $("$(build_example bench_machine)")"
  per_core_fma before
  echo "pytorch: $("$py" - <<'PY'
import re
try:
    import torch
except ImportError:
    print("not installed here")
else:
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    print(f"{torch.__version__}, {torch.get_num_threads()} threads, BLAS {blas.group(1) if blas else '?'}, "
          f"MKL {torch.backends.mkl.is_available()}, oneDNN {torch.backends.mkldnn.is_available()}, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
PY
)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# secs CMD...: the wall seconds CMD takes, its output thrown away (speed.sh's runs).
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }

# load_after: the load when the benchmark ends (a busy machine reads slower).
load_after() {
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  per_core_fma after
}

# per_core_fma WHEN: one thread's f32 FMA rate pinned to each core in turn
# (bench_machine --fma, under a second each). On the shared machine a core can
# run well below the other for minutes (192 against 149 GFLOP/s), and a 2-thread
# step waits on the slower one; the load average does not show it.
per_core_fma() {
  command -v taskset > /dev/null || return 0
  local bin rates="" c part cpus
  bin="$(build_example bench_machine)"
  # the cores this process may run on ("0-1", or "4,6-7" under a cpuset)
  cpus=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
  for part in ${cpus//,/ }; do
    for c in $(seq "${part%-*}" "${part#*-}"); do
      rates+="${rates:+, }cpu$c $(taskset -c "$c" "$bin" --fma 2> /dev/null || echo '?')"
    done
  done
  echo "f32 FMA rate per core, one thread pinned to each, $1: $rates GFLOP/s"
}

