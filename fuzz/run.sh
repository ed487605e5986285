#!/usr/bin/env bash
# Fuzzes one target with AFL++ through cargo-afl, on stable Rust.
#
#   fuzz/run.sh TARGET MINUTES   fuzz TARGET, then minimise its corpus into fuzz/corpus/TARGET
#   fuzz/run.sh --list           the targets
#   fuzz/run.sh --minimise TARGET  minimise fuzz/out/TARGET's queue into fuzz/corpus/TARGET
#   fuzz/run.sh --replay FILE... run files through a target (TARGET=name) without AFL
#
# Needs `cargo install cargo-afl` (and gcc, make) once; AFL's work folder is
# fuzz/out/TARGET (ignored by git). A crash lands in fuzz/out/TARGET/default/crashes:
# fix it, copy the input into fuzz/corpus/TARGET/ as a regression case (cargo test
# replays it), and add a unit test. On a shared machine the fuzzer runs under
# `nice -n 19`; every cargo command takes /tmp/cargo.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="$PWD/target/afl"
BIN="$CARGO_TARGET_DIR/release/mechlab-fuzz"
CORPUS=fuzz/corpus
OUT=fuzz/out

build() {
    flock /tmp/cargo.lock cargo afl build --release --features afl -p mechlab-fuzz --quiet
}

# Keeps the smallest set of inputs that covers the queue's edges (hit counts
# ignored), smallest first up to a size budget so the repository stays small,
# plus the hand-written regression cases (finding-*) and seeds that tests read (seed-*).
minimise() {
    local target=$1 min="$OUT/$1.min" budget=$((32 * 1024)) used=0 n=0
    rm -rf "$min"
    nice -n 19 cargo afl cmin -e -i "$OUT/$target/default/queue" -o "$min" -t 1000 -m 1024 \
        -- "$BIN" "$target" >"$OUT/$target.cmin.log" 2>&1
    find "$CORPUS/$target" -type f ! -name 'finding-*' ! -name 'seed-*' -delete
    while read -r size f; do
        used=$((used + size))
        [ "$used" -le "$budget" ] || break
        n=$((n + 1))
        # AFL's names hold `:` and `,`: plain numbered names travel everywhere.
        cp "$f" "$CORPUS/$target/$(printf 'min-%03d' "$n")"
    done < <(find "$min" -type f -printf '%s %p\n' | sort -n)
    echo "corpus: $(ls "$CORPUS/$target" | wc -l) of $(ls "$min" | wc -l) minimised files, $(cat "$CORPUS/$target"/* | wc -c) bytes"
}

case "${1:-}" in
--minimise)
    minimise "${2:?usage: fuzz/run.sh --minimise TARGET}"
    exit 0
    ;;
--list)
    ls "$CORPUS"
    exit 0
    ;;
--replay)
    shift
    build
    for f in "$@"; do
        echo "== $f"
        # AFL's binary reads one input on stdin when it is not under afl-fuzz.
        "$BIN" "${TARGET:?set TARGET=name}" <"$f"
    done
    exit 0
    ;;
"" | -*)
    sed -n 4,12p "$0"
    exit 2
    ;;
esac

target=$1
minutes=${2:?usage: fuzz/run.sh TARGET MINUTES}
[ -d "$CORPUS/$target" ] || { echo "no corpus folder $CORPUS/$target (see --list)" >&2; exit 2; }
build

export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
export AFL_NO_AFFINITY=1 AFL_SKIP_CRASHES=1
rm -rf "${OUT:?}/$target"
mkdir -p "$OUT"
# -t: 1 s per input is a hang; -m: 1 GiB is unbounded allocation.
nice -n 19 cargo afl fuzz -i "$CORPUS/$target" -o "$OUT/$target" -t 1000 -m 1024 \
    -V $((minutes * 60)) -- "$BIN" "$target" >"$OUT/$target.log" 2>&1 || {
    echo "afl-fuzz failed; see $OUT/$target.log" >&2
    tail -20 "$OUT/$target.log" >&2
    exit 1
}
stats="$OUT/$target/default/fuzzer_stats"
grep -E '^(run_time|execs_done|execs_per_sec|corpus_count|saved_crashes|saved_hangs) ' "$stats"

crashes=$(find "$OUT/$target/default/crashes" "$OUT/$target/default/hangs" -type f ! -name README.txt | wc -l)
if [ "$crashes" -gt 0 ]; then
    echo "$crashes crashing or hanging inputs in $OUT/$target/default/{crashes,hangs}: fix them before minimising" >&2
    exit 1
fi

minimise "$target"
