#!/usr/bin/env bash
# bench/latency.sh — the inference-latency figures of issue #13, one command.
#
#   bash bench/latency.sh [--quick|--tiny] [--repeat N] [--images N] [--no-build] [--chute PATH]
#
# Why a script: the target ("p99 added latency at 50% of the maximum rate
# <= 2x the single-image decode+transform time measured in the same run;
# compare with a plain Python loop doing PIL decode + torchvision transform
# per request on the same cores") needs several measurements taken on the
# same cores in one go — chute's single-image time, its max rate and the
# run at half of it, for the latency preset (max batch 1, unordered) and
# the batch preset (batches of 8, 1 ms deadline), and the same for the
# PIL + torchvision peer on the same Poisson arrival times — and the
# closing note needs all of them with the machine they ran on.  This script
# builds chute (Release), makes an ImageNet-like JPEG tree
# (bench/make_dataset.py), prints the machine (cores, CPU, load, commit),
# runs bench/latency.py with N alternating repeats (default 3) and writes
# the tables to the terminal and to bench/results-latency.md, the raw JSON
# to bench/data/latency/results.json.  Definitions are printed with the
# tables (and in bench/README.md).
#
#   --quick   shorter runs (5 s runs, 8 probes; still --repeat, default 3): minutes
#   --tiny    seconds: checks that everything runs (no figures)
set -u -o pipefail

QUICK=0
TINY=0
BUILD=1
REPEAT=3
IMAGES=1000
CHUTE=build/chute
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --tiny) TINY=1 ;;
        --no-build) BUILD=0 ;;
        --chute) [ $# -ge 2 ] || { echo "latency.sh: --chute needs a path" >&2; exit 2; }
                 CHUTE=$2; BUILD=0; shift ;;
        --repeat) [ $# -ge 2 ] || { echo "latency.sh: --repeat needs a number" >&2; exit 2; }
                  REPEAT=$2; shift ;;
        --images) [ $# -ge 2 ] || { echo "latency.sh: --images needs a number" >&2; exit 2; }
                  IMAGES=$2; shift ;;
        -h|--help) sed -n 2,25p "$0"; exit 0 ;;
        *) echo "latency.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
case "$REPEAT$IMAGES" in
    *[!0-9]*) echo "latency.sh: --repeat and --images take positive numbers" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
DATA=bench/data/latency
[ "$TINY" = 1 ] && { DATA=bench/data/latency-tiny; IMAGES=64; REPEAT=1; }
TREE=$DATA/tree
RESULTS=bench/results-latency.md
[ "$TINY" = 1 ] && RESULTS=$DATA/results-latency.md
mkdir -p "$DATA" || exit 1

if [ "$BUILD" = 1 ]; then
    { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null &&
      cmake --build build -j"$(nproc)" --target chute_cli >/dev/null; } ||
        { echo "latency.sh: building chute failed" >&2; exit 1; }
fi
[ -x "$CHUTE" ] || { echo "latency.sh: $CHUTE not found" >&2; exit 1; }
"$PY" bench/make_dataset.py "$TREE" --images "$IMAGES" --classes 10 >&2 ||
    { echo "latency.sh: bench/make_dataset.py failed" >&2; exit 1; }

ARGS=(--repeat "$REPEAT" --json "$DATA/results.json" --chute "$CHUTE")
[ "$QUICK" = 1 ] && ARGS+=(--duration 5 --probe-duration 2 --probes 8 --py-probes 6)
[ "$TINY" = 1 ] && ARGS+=(--tiny)

{
    echo "# Inference latency (issue #13) — bench/latency.sh"
    echo
    echo "- when: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')"
    echo "- machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- build: $("$CHUTE" version 2>/dev/null | head -1), type $(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' build/CMakeCache.txt 2>/dev/null)"
    echo "- data: $TREE ($IMAGES ImageNet-like JPEGs, bench/make_dataset.py)"
    "$PY" bench/latency.py "$TREE" "${ARGS[@]}"
    rc=$?
    echo
    echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit $rc
} | tee "$RESULTS"
rc=${PIPESTATUS[0]}
echo "latency.sh: tables in $RESULTS, raw results in $DATA/results.json" >&2
exit "$rc"
