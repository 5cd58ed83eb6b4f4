#!/usr/bin/env bash
# Build bench/json_parse.c (once per JSON library: their headers clash) and
# run it on a synthetic COCO-sized instances file (bench/make_coco_json.py).
#   bash bench/json_parse.sh [COCO.json] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-bench
mkdir -p "$B" bench/data
for i in 0 1 2 3; do cc -O2 -Wall -Wextra -DJP_LIB=$i -c bench/json_parse.c -o "$B/json_parse$i.o"; done
cc "$B"/json_parse[0-3].o -o "$B/json_parse" -ljansson -ljson-c -lcjson
F=${1:-bench/data/coco_synth.json}
[ -f "$F" ] || python3 bench/make_coco_json.py "$F"
ls -l "$F"
"$B/json_parse" "$F" "${2:-3}"
