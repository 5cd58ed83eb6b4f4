#!/usr/bin/env bash
# The main job: set up, build, make a default ImageNet-like dataset from
# real photos (Debian's wallpaper package), pack it into shards and print
# `chute bench` for the train transform on the shards and on the tree,
# then what to try next.
#   usage: bash scripts/demo.sh [--images N]
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES=2000
[ "${1:-}" = "--images" ] && IMAGES="$2"
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
DATA=bench/data
/usr/bin/python3 bench/make_dataset.py "$DATA/tree" --images "$IMAGES"
./build/chute pack "$DATA/tree" "$DATA/shards"
echo
./build/chute bench "$DATA/shards" --transform train --epochs 2
./build/chute bench "$DATA/tree" --transform train
# What the two runs above measured, and where to go from here.
cat <<NEXT

Next steps:
  - Both runs had no training step, so the consumer always waits: they show
    the input alone.  To see whether it keeps up with a model, give its step
    time:  ./build/chute bench $DATA/shards --step-ms 50
    or ask for the bottleneck and advice:  ./build/chute doctor $DATA/shards --gpu-rate 2500
  - From Python: install the package (python/README.md, "Install"), then
    loader = chute.Loader("$DATA/shards", batch_size=256) replaces a DataLoader.
  - Your own data: ./build/chute pack /path/to/imagefolder OUT, then bench OUT.
  - The demo left $(du -sh "$DATA" 2>/dev/null | cut -f1) in $DATA and the build in build/:
    rm -rf $DATA build to reclaim the space.
NEXT
