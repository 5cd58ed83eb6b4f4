#!/usr/bin/env bash
# bench/coldcache.sh — what a cold page cache costs, with and without the
# read-ahead (loader option readahead), one command.
#
#   bash bench/coldcache.sh [--images N] [--readahead K] [--workers N] [--runs R]
#                           [--no-build] [--remote] [--fadvise]
#
# Builds chute (Release), makes the ImageNet-like JPEG tree of bench/run.sh
# (bench/make_dataset.py) and packs it into chute shards, then runs
# `chute bench` (train) on the shards and on the tree, each with the
# read-ahead off (readahead 0), on K blocking reader threads
# (CHUTE_READAHEAD_ENGINE=threads), through io_uring (the default engine for
# local files: one thread, K reads in flight) and, for the shards, through
# io_uring with O_DIRECT (--direct-io 1), each warm (files read into the
# page cache first) and cold (`sync; echo 3 > /proc/sys/vm/drop_caches` as
# root, else -- or with --fadvise, which leaves other users' caches alone --
# posix_fadvise(DONTNEED) on every file), R runs each (the median is kept),
# and prints images/s, cold/warm, the engine `chute bench` reports having
# used and the most reads it had in flight.  The issue's targets: with the
# read-ahead, cold shards >= 95% of warm, cold tree >= 90%.
# --remote also runs bench/remote_latency.py (SeaweedFS + tests/tools/delayproxy.c
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
FADVISE=0
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
        --fadvise) FADVISE=1 ;;
        -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
    if [ "$FADVISE" = 0 ] && [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
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

# "images/s engine inflight_max" of one `chute bench` run (train, the
# default options) in read-ahead mode $2: off, threads, io_uring, direct.
one() { # $1 path, $2 mode
    local args=("$1" --json --quiet --transform train --readahead "$RA") eng=""
    case "$2" in
        off) args=("$1" --json --quiet --transform train --readahead 0) ;;
        threads) eng=threads ;;
        direct) args+=(--direct-io 1) ;;
    esac
    [ -n "$WORKERS" ] && args+=(--workers "$WORKERS")
    CHUTE_READAHEAD_ENGINE=$eng build/chute bench "${args[@]}" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print(d["images_per_sec"], d.get("readahead_engine", "?"), d.get("readahead_inflight_max", 0))'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== bench: train, $RUNS runs each, median images/s (readahead $RA)"
printf "%-7s %-9s %10s %10s %10s  %-9s %s\n" source read-ahead warm cold cold/warm engine in-flight
for src in shards tree; do
    path=$SHARDS
    modes="off threads io_uring direct"
    if [ "$src" = tree ]; then path=$TREE; modes="off threads io_uring"; fi
    for mode in $modes; do
        log=$DATA/runs-$src-$mode.txt
        : >"$log"
        for r in $(seq "$RUNS"); do warm "$path"; echo "warm $(one "$path" "$mode")" >>"$log"; done
        for r in $(seq "$RUNS"); do drop_caches "$path"; echo "cold $(one "$path" "$mode")" >>"$log"; done
        w=$(awk '$1 == "warm" {print $2}' "$log" | median)
        c=$(awk '$1 == "cold" {print $2}' "$log" | median)
        [ -n "$w" ] && [ -n "$c" ] || { echo "coldcache.sh: a bench run failed (see $log)" >&2; exit 1; }
        eng=$(awk '{print $3}' "$log" | sort -u | paste -sd, -)
        inflight=$(awk '{print $4}' "$log" | sort -g | tail -1)
        printf "%-7s %-9s %10.1f %10.1f %9.1f%%  %-9s %s\n" "$src" "$mode" "$w" "$c" \
            "$(echo "$c $w" | awk '{print 100 * $1 / $2}')" "$eng" "$inflight"
        case "$mode" in
            io_uring|direct) [ "$eng" = io_uring ] ||
                echo "  note: io_uring was not used ($eng): the kernel or a seccomp filter refuses it" ;;
        esac
    done
done

if [ "$REMOTE" = 1 ]; then
    echo "== remote: SeaweedFS, delayproxy adding 20 ms per request"
    "$PY" bench/remote_latency.py "$SHARDS" --readahead "$RA" ${WORKERS:+--workers "$WORKERS"}
fi
