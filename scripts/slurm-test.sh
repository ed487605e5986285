#!/usr/bin/env bash
# End-to-end test of `mechlab sweep --slurm` against a real one-node Slurm.
#
# Starts munged, slurmctld and slurmd on this machine (Debian's packages, installed
# with apt-get when missing; needs root), configured for localhost without cgroups,
# all state under a temporary folder. Then:
#   1. `--dry-run` writes the scripts and submits nothing; `sbatch --test-only`
#      accepts the array script;
#   2. a 2 x 3 sweep (a preset cut to a few seconds with --set) goes through
#      `mechlab sweep --slurm`; one array task is requeued part-way through its run
#      (as a preemption would), and must resume that run from its checkpoints;
#   3. the merge job's index.csv, summary.csv and summary.json must equal those of
#      the same sweep run unsharded with plain `mechlab sweep`.
# Every daemon it started is stopped by its process id on exit.
#
# MECHLAB_BIN: the mechlab binary (default: `cargo build --bin mechlab`, dev
# profile). KEEP=1 keeps the temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
say() { echo "== [$((SECONDS - START)) s] $*"; }
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root: it starts slurmctld, slurmd and munged"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurmctld slurmd slurm-client munge"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
fi

if [ -z "${MECHLAB_BIN:-}" ]; then
    say "cargo build --workspace --bin mechlab"
    cargo build --quiet --workspace --bin mechlab
    MECHLAB_BIN="${CARGO_TARGET_DIR:-target}/debug/mechlab"
fi
MECHLAB_BIN=$(realpath "$MECHLAB_BIN")
[ -x "$MECHLAB_BIN" ] || fail "MECHLAB_BIN=$MECHLAB_BIN is not an executable"

T=$(mktemp -d /tmp/mechlab-slurm.XXXXXX)
PIDS=()
cleanup() {
    local rc=$?
    # Jobs first (only ours: SLURM_CONF points at our slurmctld), while it runs.
    if [ "${#PIDS[@]}" -ge 2 ] && kill -0 "${PIDS[1]}" 2>/dev/null; then
        scancel --quiet --user=root 2>/dev/null || true
        sleep 1
    fi
    # Daemons in reverse order of start, each by the pid we started it with.
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill "${PIDS[i]}" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    if [ "$rc" != 0 ]; then
        echo "--- logs in $T/log (kept)" >&2
        tail -n 20 "$T"/log/* >&2 2>/dev/null || true
        for f in "$T"/sweeps/*/logs/*.out; do
            [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
        done
    elif [ -z "${KEEP:-}" ]; then
        rm -rf "$T"
    fi
    exit "$rc"
}
trap cleanup EXIT

HOST=$(hostname -s)
CLUSTER=mechlabtest
# Ports off Slurm's defaults and varied, so a real Slurm on the machine or a
# second copy of this test does not collide with this one.
PORT=$((20000 + RANDOM % 20000))
mkdir -p "$T/state" "$T/spool" "$T/log" "$T/sweeps"
export SLURM_CONF=$T/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge.sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF

say "starting munged, slurmctld, slurmd in $T"
dd if=/dev/urandom of="$T/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge.key"
munged --foreground --force --socket="$T/munge.sock" --key-file="$T/munge.key" \
    --pid-file="$T/munged.pid" --seed-file="$T/munge.seed" --log-file="$T/log/munged.log" \
    >>"$T/log/munged.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [ -S "$T/munge.sock" ] && break; sleep 0.1; done
[ -S "$T/munge.sock" ] || fail "munged did not start"
# In the foreground (-D) so that $! is the daemon's own pid; they log to files.
slurmctld -D -f "$SLURM_CONF" >>"$T/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" >>"$T/log/slurmd.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    state=$(sinfo -h -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.3
done
[ "$state" = idle ] || fail "the node did not come up (sinfo: ${state:-no answer})"

# A 2 x 3 sweep of a preset cut to a few seconds per run.
SWEEP=(induction-simplified --grid train.lr=0.5,1.0 --seeds 0..3
    --set train.steps=500 --set data.n_train=3000 --set data.n_val=500)
M() { "$MECHLAB_BIN" --quiet "$@"; }

say "--dry-run writes the scripts and submits nothing"
before=$(squeue -h | wc -l)
M sweep "${SWEEP[@]}" --out "$T/sweeps/dry" --slurm --dry-run --array-parallelism 2 \
    --time 00:10:00 --sbatch-arg=--comment=mechlab-test >/dev/null
[ -f "$T/sweeps/dry/slurm/array.sbatch" ] && [ -f "$T/sweeps/dry/slurm/merge.sbatch" ] ||
    fail "--dry-run wrote no scripts"
[ ! -e "$T/sweeps/dry/slurm/jobs.json" ] || fail "--dry-run recorded submitted jobs"
[ "$(squeue -h | wc -l)" = "$before" ] || fail "--dry-run submitted a job"
grep -qx '#SBATCH --array=0-5%2' "$T/sweeps/dry/slurm/array.sbatch" || fail "no --array=0-5%2"
sbatch --test-only "$T/sweeps/dry/slurm/array.sbatch" 2>"$T/test-only.txt" ||
    fail "sbatch --test-only rejects the array script: $(cat "$T/test-only.txt")"
grep -q "to start at" "$T/test-only.txt" || fail "sbatch --test-only: $(cat "$T/test-only.txt")"
sbatch --test-only "$T/sweeps/dry/slurm/merge.sbatch" 2>/dev/null ||
    fail "sbatch --test-only rejects the merge script"

say "submitting the sweep through mechlab sweep --slurm"
S=$T/sweeps/slurm
M sweep "${SWEEP[@]}" --out "$S" --slurm --time 00:10:00
ARRAY=$(sed -n 's/.*"array": "\([0-9]*\)".*/\1/p' "$S/slurm/jobs.json")
MERGE=$(sed -n 's/.*"merge": "\([0-9]*\)".*/\1/p' "$S/slurm/jobs.json")
[ -n "$ARRAY" ] && [ -n "$MERGE" ] || fail "no job ids in $S/slurm/jobs.json"

# Task 0 runs p0-s0 alone. Requeue it once that run has written a checkpoint past
# the start but not finished: the requeued attempt must resume it.
RUN0=$S/runs/p0-s0
for _ in $(seq 600); do
    [ -f "$RUN0/checkpoints/step_000032.safetensors" ] && break
    sleep 0.1
done
[ -f "$RUN0/checkpoints/step_000032.safetensors" ] || fail "task 0 never reached step 32"
[ ! -f "$RUN0/summary.json" ] || fail "p0-s0 finished before it could be requeued (make it longer)"
say "requeueing task ${ARRAY}_0 part-way through p0-s0"
scontrol requeue "${ARRAY}_0"
# A requeued job waits out a begin time; let it start as soon as a CPU is free.
sleep 1
scontrol update "JobId=${ARRAY}_0" StartTime=now 2>/dev/null || true
# squeue shows the requeued task queued again, so its unfinished run is not failed.
M sweep-status "$S" >"$T/status.txt"
sed 's/^/   /' "$T/status.txt"
grep -q "^  failed   0$" "$T/status.txt" || fail "sweep-status counts the requeued run as failed"
grep -q "^  done     6$" "$T/status.txt" && fail "sweep-status says done before the requeued run finished"

say "meanwhile: the same sweep unsharded on this machine"
M sweep "${SWEEP[@]}" --out "$T/sweeps/local" --jobs 1 >/dev/null

M sweep-status "$S" | sed 's/^/   /'
say "waiting for merge job $MERGE"
for _ in $(seq 1200); do
    squeue -h -j "$MERGE" 2>/dev/null | grep -q . || break
    sleep 0.5
done
squeue -h -j "$MERGE" 2>/dev/null | grep -q . && fail "the merge job is still queued after 10 minutes"
M sweep-status "$S" | sed 's/^/   /'
cat "$S"/logs/merge_*.out

grep -q '"resumed":true' "$RUN0/timing.json" || fail "p0-s0 was not resumed: $(cat "$RUN0/timing.json")"
grep -q "attempt 2" "$S/logs/${ARRAY}_0.out" || fail "task 0 ran only once: $(cat "$S/logs/${ARRAY}_0.out")"
grep -q "p0-s0: resumed from its checkpoints" "$S/logs/${ARRAY}_0.out" ||
    fail "task 0's second attempt did not resume p0-s0"
for f in index.csv summary.csv summary.json; do
    [ -f "$S/$f" ] || fail "the merge job wrote no $f"
    cmp -s "$T/sweeps/local/$f" "$S/$f" || {
        diff "$T/sweeps/local/$f" "$S/$f" | head -20 >&2
        fail "$f of the Slurm sweep differs from the unsharded one"
    }
done
grep -q '"missing": 0' "$S/summary.json" || fail "summary.json does not say 0 missing"
say "ok: the Slurm sweep (with a requeued task) equals the unsharded sweep"
