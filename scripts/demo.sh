#!/usr/bin/env bash
# The main job: set up, build, make a default ImageNet-like dataset from
# real photos (Debian's wallpaper package), pack it into shards and print
# `chute bench` for the train transform on the shards and on the tree.
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
