#!/usr/bin/env bash
# chute iobench against fio on the same file with the same parameters, in
# one run: random reads with ImageNet's size mix and large sequential
# reads, O_DIRECT, io_uring.  Prints IOPS and MB/s of each and the ratio.
#   usage: bash bench/iobench_vs_fio.sh [DIR] [--time 10] [--qd 16] [--size 2G]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-bench/data/iobench}"; shift || true
TIME=2; QD=16; SIZE=2G
while [ $# -gt 0 ]; do
  case "$1" in
    --time) TIME="$2"; shift 2;; --qd) QD="$2"; shift 2;; --size) SIZE="$2"; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
[ -x build/chute ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build build -j"$(nproc)" >/dev/null; }
mkdir -p "$DIR"
FILE="$DIR/chute-iobench.dat"
# Lay the file out once (chute creates it new and keeps it; both tools then
# read the same file; chute never writes to a file that already exists).
[ -e "$FILE" ] || ./build/chute iobench "$FILE" --size "$SIZE" --time 0.1s --keep --json >/dev/null
MIX="2k/1:4k/2:8k/4:16k/8:32k/13:64k/38:128k/33:256k/1"
PY=/usr/bin/python3
REPS="${REPS:-12}"
summarise() { # name file-with-chute-jsons file-with-fio-jsons
  $PY - "$1" "$2" "$3" <<'PYEOF'
import json, statistics as st, sys
name = sys.argv[1]
cs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
fs = [json.loads(l)["jobs"][0]["read"] for l in open(sys.argv[3]) if l.strip()]
ci = st.median(c["iops"] for c in cs); cm = st.median(c["mb_per_sec"] for c in cs)
fi = st.median(f["iops"] for f in fs); fm = st.median(f["bw_bytes"] / 1e6 for f in fs)
c50 = st.median(c["lat_p50_us"] for c in cs); c99 = st.median(c["lat_p99_us"] for c in cs)
f50 = st.median(f["clat_ns"]["percentile"]["50.000000"] / 1e3 for f in fs)
f99 = st.median(f["clat_ns"]["percentile"]["99.000000"] / 1e3 for f in fs)
# Storage on shared machines drifts between runs: also give the median of
# the ratios of back-to-back pairs, which cancels slow drift.
pr_i = st.median(c["iops"] / f["iops"] for c, f in zip(cs, fs))
pr_m = st.median(c["mb_per_sec"] / (f["bw_bytes"] / 1e6) for c, f in zip(cs, fs))
print(f"| {name} | {ci:,.0f} | {fi:,.0f} | {ci/fi:.3f} ({pr_i:.3f}) | {cm:,.1f} | {fm:,.1f} | {cm/fm:.3f} ({pr_m:.3f}) | {c50:.0f} / {f50:.0f} | {c99:.0f} / {f99:.0f} |")
PYEOF
}
echo "iobench vs fio $(fio --version) on $FILE ($SIZE), O_DIRECT, io_uring, 1 job; medians of $REPS alternating runs of ${TIME}s each; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| pattern | chute IOPS | fio IOPS | ratio of medians (median of pair ratios) | chute MB/s | fio MB/s | ratio (pairs) | p50 us chute/fio | p99 us chute/fio |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
for i in $(seq $REPS); do
  ./build/chute iobench "$FILE" --pattern imagenet --direct --qd "$QD" --time "${TIME}s" --size "$SIZE" --json >>"$TMP/c1"
  fio --name=imagenet --filename="$FILE" --rw=randread --bssplit="$MIX" --blockalign=4k --direct=1 \
      --ioengine=io_uring --iodepth="$QD" --numjobs=1 --time_based --runtime="$TIME" --size="$SIZE" \
      --output-format=json 2>/dev/null | tr -d '\n' >>"$TMP/f1"; echo >>"$TMP/f1"
  ./build/chute iobench "$FILE" --pattern sequential --bs 1M --direct --qd 4 --time "${TIME}s" --size "$SIZE" --json >>"$TMP/c2"
  fio --name=seq --filename="$FILE" --rw=read --bs=1M --direct=1 --ioengine=io_uring --iodepth=4 \
      --numjobs=1 --time_based --runtime="$TIME" --size="$SIZE" --output-format=json 2>/dev/null | tr -d '\n' >>"$TMP/f2"; echo >>"$TMP/f2"
done
summarise "random, ImageNet size mix, qd $QD" "$TMP/c1" "$TMP/f1"
summarise "sequential 1M, qd 4" "$TMP/c2" "$TMP/f2"
