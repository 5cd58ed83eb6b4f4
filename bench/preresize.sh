#!/usr/bin/env bash
# bench/preresize.sh — what `pack --max-side 256` and `pack --raw --max-side 256`
# buy at load time, in one run on the same cores:
#
#   bash bench/preresize.sh [--images N] [--quick] [--epochs E] [--tree DIR]
#                           [--chute PATH] [--work DIR] [--max-side N]
#
# Makes the ImageNet-like tree (bench/make_dataset.py; or takes --tree), packs
# it three ways (as it is, --max-side N, --raw --max-side N), then runs
# `chute bench` with the train transform over each (one warm-up epoch first,
# so all three read from the page cache) and prints:
#
#   1. images/s and CPU ms/image (process CPU time / images, all threads) for
#      each, with the ratio to the full-size shards (the issue's targets:
#      >= 2.5x for --max-side 256, >= 5x for --raw --max-side 256) by
#      images/s and by CPU ms/image (the latter barely moves with other load
#      on the machine), and the bytes on disk;
#   2. a thread-scaling table: images/s at 1, 2, 4, 8, 16 workers (those
#      that fit the CPUs this process may use), for each dataset, with the
#      speedup over 1 worker.
#
# Everything lives under --work (default bench/data/preresize, git-ignored);
# shards are re-packed only when missing or older than the chute binary.
# This script only measures: timing figures are for a quiet machine.
set -u -o pipefail

IMAGES=2000
EPOCHS=2
TREE=""
CHUTE=build/chute
WORK=bench/data/preresize
MAXSIDE=256
PY=/usr/bin/python3
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES=$2; shift ;;
        --quick) IMAGES=300; EPOCHS=1 ;;
        --epochs) EPOCHS=$2; shift ;;
        --tree) TREE=$2; shift ;;
        --chute) CHUTE=$2; shift ;;
        --work) WORK=$2; shift ;;
        --max-side) MAXSIDE=$2; shift ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "preresize.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
[ -x "$CHUTE" ] || { echo "preresize.sh: $CHUTE not built (cmake --build build)" >&2; exit 2; }
mkdir -p "$WORK" || exit 1
if [ -z "$TREE" ]; then
    TREE=$WORK/tree
    $PY bench/make_dataset.py "$TREE" --images "$IMAGES" || exit 1
fi

pack() { # NAME OPTS...
    local out=$WORK/$1; shift
    if [ ! -f "$out/chute.manifest" ] || [ "$CHUTE" -nt "$out/chute.manifest" ] ||
       [ "$TREE" -nt "$out/chute.manifest" ]; then
        "$CHUTE" pack "$TREE" "$out" "$@" >/dev/null || return 1
    fi
}
pack full || exit 1
pack ms "--max-side" "$MAXSIDE" || exit 1
pack raw "--raw" "--max-side" "$MAXSIDE" || exit 1

CPUS=$($PY -c 'import os; print(len(os.sched_getaffinity(0)))')

# bench NAME WORKERS -> "images_per_sec cpu_ms_per_image"
bench() {
    "$CHUTE" bench "$WORK/$1" --quiet --epochs 1 --workers "$2" >/dev/null || return 1
    "$CHUTE" bench "$WORK/$1" --json --quiet --epochs "$EPOCHS" --workers "$2" |
        $PY -c 'import json,sys; r=json.load(sys.stdin); print("%.1f %.3f" % (r["images_per_sec"], r["cpu_seconds_per_1k"]))'
}

declare -A IPS CPU
for d in full ms raw; do
    read -r IPS[$d] CPU[$d] < <(bench $d "$CPUS") || { echo "bench $d failed" >&2; exit 1; }
done
size() { du -sb "$WORK/$1" | cut -f1; }
echo
echo "train transform, 224 px, float32, $CPUS workers, $EPOCHS epoch(s) of $(find "$TREE" -type f | wc -l) files"
echo
echo "| shards | images/s | CPU ms/image | ratio to full | CPU ratio to full | MB on disk |"
echo "|---|---:|---:|---:|---:|---:|"
for d in full ms raw; do
    case $d in full) n="full size";; ms) n="--max-side $MAXSIDE";; raw) n="--raw --max-side $MAXSIDE";; esac
    $PY -c "print('| %s | %.0f | %.3f | %.2fx | %.2fx | %.1f |' % ('$n', ${IPS[$d]}, ${CPU[$d]}, ${IPS[$d]} / ${IPS[full]}, ${CPU[full]} / ${CPU[$d]}, $(size $d) / 1e6))"
done

echo
echo "thread scaling (images/s; speedup over 1 worker in parentheses)"
echo
hdr="| workers |"; sep="|---:|"
for d in full ms raw; do hdr="$hdr $d |"; sep="$sep---:|"; done
echo "$hdr"; echo "$sep"
declare -A ONE
for w in 1 2 4 8 16; do
    [ "$w" -le "$CPUS" ] || break
    row="| $w |"
    for d in full ms raw; do
        read -r ips cpu < <(bench $d "$w") || { echo "bench $d --workers $w failed" >&2; exit 1; }
        [ "$w" -eq 1 ] && ONE[$d]=$ips
        row="$row $($PY -c "print('%.0f (%.2fx)' % ($ips, $ips / ${ONE[$d]}))") |"
    done
    echo "$row"
done
