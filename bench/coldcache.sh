#!/usr/bin/env bash
# bench/coldcache.sh — what a cold page cache costs, with and without the
# read-ahead (loader option readahead), one command.
#
#   bash bench/coldcache.sh [--images N] [--readahead K] [--workers N] [--runs R]
#                           [--no-build] [--remote]
#
# Builds chute (Release), makes the ImageNet-like JPEG tree of bench/run.sh
# (bench/make_dataset.py) and packs it into chute shards, then runs
# `chute bench` (train) on the shards and on the tree, each with readahead 0
# and K, each warm (files read into the page cache first) and cold
# (`sync; echo 3 > /proc/sys/vm/drop_caches` as root, else
# posix_fadvise(DONTNEED) on every file), R runs each (the median is kept),
# and prints images/s and cold/warm.  The issue's targets: with the
# read-ahead, cold shards >= 95% of warm, cold tree >= 90%.
# --remote also runs bench/remote_latency.py (SeaweedFS + faultproxy.py
# adding 20 ms per request).
#
# Data lives under bench/data/coldcache-<N>/ (git-ignored).  --images 64 is
# a smoke test (seconds), not a figure.
set -u -o pipefail

IMAGES=4000
RA=64
WORKERS=""
RUNS=3
BUILD=1
REMOTE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --images|--readahead|--workers|--runs)
            [ $# -ge 2 ] || { echo "coldcache.sh: $1 needs a value" >&2; exit 2; }
            case "$1" in
                --images) IMAGES=$2 ;;
                --readahead) RA=$2 ;;
                --workers) WORKERS=$2 ;;
                --runs) RUNS=$2 ;;
            esac
            shift ;;
        --no-build) BUILD=0 ;;
        --remote) REMOTE=1 ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "coldcache.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
for v in "$IMAGES" "$RA" "$RUNS"; do
    case "$v" in ''|*[!0-9]*) echo "coldcache.sh: numbers expected" >&2; exit 2 ;; esac
done

cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
CORES=$(nproc)
DATA=bench/data/coldcache-$IMAGES
TREE=$DATA/tree
SHARDS=$DATA/shards
mkdir -p "$DATA" || exit 1

if [ "$BUILD" = 1 ]; then
    echo "== build (log in $DATA/build.log)"
    { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$CORES"; } \
        >"$DATA/build.log" 2>&1 || { echo "coldcache.sh: build failed; see $DATA/build.log" >&2; exit 1; }
fi
[ -x build/chute ] || { echo "coldcache.sh: no build/chute" >&2; exit 1; }

echo "== dataset: $IMAGES images"
"$PY" bench/make_dataset.py "$TREE" --images "$IMAGES" --classes 10 ||
    { echo "coldcache.sh: bench/make_dataset.py failed" >&2; exit 1; }
if [ -f "$SHARDS/chute.manifest" ] && [ "$SHARDS/chute.manifest" -nt "$TREE.stamp" ] &&
   [ "$SHARDS/chute.manifest" -nt build/chute ]; then
    echo "shards in $SHARDS are up to date"
else
    rm -rf "$SHARDS"
    build/chute pack "$TREE" "$SHARDS" | tail -2 || { echo "coldcache.sh: pack failed" >&2; exit 1; }
fi

drop_caches() { # $1: directory
    sync
    if [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
        return 0
    fi
    "$PY" - "$1" <<'EOF'
import os, sys
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        fd = os.open(os.path.join(d, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
EOF
}
warm() { find "$1" -type f -exec cat {} + >/dev/null; }

# images/s of one `chute bench` run (train, the default options).
one() { # $1 path, $2 readahead
    local args=("$1" --json --quiet --transform train --readahead "$2")
    [ -n "$WORKERS" ] && args+=(--workers "$WORKERS")
    build/chute bench "${args[@]}" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["images_per_sec"])'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== bench: train, $RUNS runs each, median images/s"
printf "%-7s %-10s %10s %10s %10s\n" source readahead warm cold cold/warm
for src in shards tree; do
    path=$SHARDS
    [ "$src" = tree ] && path=$TREE
    for ra in 0 "$RA"; do
        w=$(for r in $(seq "$RUNS"); do warm "$path"; one "$path" "$ra"; done | median)
        c=$(for r in $(seq "$RUNS"); do drop_caches "$path"; one "$path" "$ra"; done | median)
        [ -n "$w" ] && [ -n "$c" ] || { echo "coldcache.sh: a bench run failed" >&2; exit 1; }
        printf "%-7s %-10s %10.1f %10.1f %9.1f%%\n" "$src" "$ra" "$w" "$c" \
            "$(echo "$c $w" | awk '{print 100 * $1 / $2}')"
    done
done

if [ "$REMOTE" = 1 ]; then
    echo "== remote: SeaweedFS, faultproxy.py adding 20 ms per request"
    "$PY" bench/remote_latency.py "$SHARDS" --readahead "$RA" ${WORKERS:+--workers "$WORKERS"}
fi
