#!/usr/bin/env bash
# bench/dcache.sh — the decoded-sample cache (decoded_cache_bytes), one command.
#
#   bash bench/dcache.sh [--images N] [--budget BYTES] [--workers N] [--transform T]
#                        [--epochs E] [--no-build]
#
# Builds chute (Release) and the Python package, makes the same ImageNet-like
# JPEG tree as bench/run.sh (bench/make_dataset.py, full-size photos), packs
# it into chute shards, then runs bench/dcache.py: train images/s and CPU
# ms/image of epoch 1 and 2 without the cache and with it (epoch 2 is the one
# the cache serves), and the cache's memory against its budget.  The issue's
# target: epoch 2 with a large enough budget >= 4x epoch 1 without.
#
# Data lives under bench/data/dcache-<N>/ (git-ignored); the tree is rebuilt
# only when its parameters change and the shards when the tree or
# build/chute is newer.  --images 64 is a smoke test (seconds), not a figure.
set -u -o pipefail

IMAGES=4000
BUDGET=$((8 << 30))
WORKERS=""
TRANSFORM=train
EPOCHS=2
BUILD=1
while [ $# -gt 0 ]; do
    case "$1" in
        --images|--budget|--workers|--transform|--epochs)
            [ $# -ge 2 ] || { echo "dcache.sh: $1 needs a value" >&2; exit 2; }
            case "$1" in
                --images) IMAGES=$2 ;;
                --budget) BUDGET=$2 ;;
                --workers) WORKERS=$2 ;;
                --transform) TRANSFORM=$2 ;;
                --epochs) EPOCHS=$2 ;;
            esac
            shift ;;
        --no-build) BUILD=0 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "dcache.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
case "$IMAGES" in ''|*[!0-9]*) echo "dcache.sh: --images must be a number" >&2; exit 2 ;; esac

cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
CORES=$(nproc)
DATA=bench/data/dcache-$IMAGES
TREE=$DATA/tree
SHARDS=$DATA/shards
LIB=build-python/lib-bench
mkdir -p "$DATA" || exit 1

if [ "$BUILD" = 1 ]; then
    echo "== build (log in $DATA/build.log)"
    { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$CORES" &&
      "$PY" setup.py -q build --build-lib "$LIB"; } >"$DATA/build.log" 2>&1 ||
        { echo "dcache.sh: build failed; see $DATA/build.log" >&2; exit 1; }
fi
[ -x build/chute ] || { echo "dcache.sh: no build/chute" >&2; exit 1; }

echo "== dataset: $IMAGES images"
"$PY" bench/make_dataset.py "$TREE" --images "$IMAGES" --classes 10 ||
    { echo "dcache.sh: bench/make_dataset.py failed" >&2; exit 1; }
if [ -f "$SHARDS/chute.manifest" ] && [ "$SHARDS/chute.manifest" -nt "$TREE.stamp" ] &&
   [ "$SHARDS/chute.manifest" -nt build/chute ]; then
    echo "shards in $SHARDS are up to date"
else
    rm -rf "$SHARDS"
    build/chute pack "$TREE" "$SHARDS" | tail -2 || { echo "dcache.sh: pack failed" >&2; exit 1; }
fi
cat "$SHARDS"/* >/dev/null  # into the page cache: both runs read from memory

echo "== bench"
ARGS=("$SHARDS" --budget "$BUDGET" --transform "$TRANSFORM" --epochs "$EPOCHS")
[ -n "$WORKERS" ] && ARGS+=(--workers "$WORKERS")
PYTHONPATH="$LIB${PYTHONPATH:+:$PYTHONPATH}" "$PY" bench/dcache.py "${ARGS[@]}"
