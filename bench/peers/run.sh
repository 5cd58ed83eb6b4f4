#!/usr/bin/env bash
# bench/peers/run.sh — chute next to DALI, tf.data, FFCV, WebDataset and the
# PyTorch DataLoader, in one run.  chute also reads the peers' own TFRecord
# and WebDataset files (chute-tfrecord, chute-wds rows).
#
#   bash bench/peers/run.sh [--quick] [--no-build] [--timeout S]
#
# 1. makes (once) the virtualenv bench/data/peers-venv from Debian's python3
#    with --system-site-packages (Debian's torch 1.13, torchvision, numpy
#    1.24, PIL stay visible) and pip-installs the peers, pinned, into it;
# 2. builds build/chute (Release) and chute's Python extension in place;
# 3. makes the dataset with bench/make_dataset.py (the one bench/run.sh uses)
#    and converts it with each peer's own writer: TFRecord (+ DALI index),
#    WebDataset tar shards, FFCV .beton, chute shards;
# 4. reads every file of every format once (warm page cache);
# 5. runs every system, train then eval transform (bench/peers/peers.py);
# 6. prints the markdown table and writes it to bench/peers/results.md.
# Everything generated lives under bench/data/ (git-ignored).
set -u -o pipefail

QUICK=0 BUILD=1 TIMEOUT=300
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --no-build) BUILD=0 ;;
        --timeout) TIMEOUT=$2; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
cd "$(dirname "$0")/../.." || exit 1
CORES=$(nproc)
if [ "$QUICK" = 1 ]; then
    DATA=bench/data/quick IMAGES=1500 EPOCHS=3
else
    DATA=bench/data IMAGES=4000 EPOCHS=2
fi
OUT=$DATA/peers-run
VENV=bench/data/peers-venv
PY=$VENV/bin/python
LOG=$OUT/setup.log
mkdir -p "$OUT"
: > "$LOG"
T_START=$(date +%s)
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
step() { printf '\n== %s\n' "$*" | tee -a "$LOG"; }
FAILED=0
SKIP=()

# ---- 1. the peers' virtualenv -------------------------------------------
# Pins: Debian's torch 1.13 is built against numpy 1.x, so numpy stays at
# Debian's 1.24.2 (constraint) and every peer is a version that accepts it:
# tensorflow-cpu 2.17.1 is the last line allowing numpy < 2 on Python 3.11
# (it wants >= 1.23.5, < 2); numba 0.60 (FFCV's JIT) supports numpy 1.24.
PINS=(tensorflow-cpu==2.17.1 nvidia-dali-cuda130==2.4.0 webdataset==1.0.2)
FFCV_PINS=(ffcv==1.0.2 numba==0.60.0)
APT_PKGS=(libturbojpeg0-dev libopencv-dev pkg-config python3-dev)
STAMP=$VENV/.peers-stamp
WANT="${PINS[*]} ${FFCV_PINS[*]} numpy==1.24.2"
step "virtualenv $VENV"
if [ -f "$STAMP" ] && [ "$(head -1 "$STAMP")" = "$WANT" ]; then
    say "reusing it ($(sed -n 2p "$STAMP"))"
else
    T0=$(date +%s)
    rm -rf "$VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV" >>"$LOG" 2>&1 || {
        say "error: cannot make the venv (apt-get install python3-venv)"; exit 1; }
    echo numpy==1.24.2 > "$VENV/constraints.txt"
    say "pip install ${PINS[*]} (numpy held at 1.24.2) ..."
    "$VENV/bin/pip" install -q -c "$VENV/constraints.txt" "${PINS[@]}" >>"$LOG" 2>&1 ||
        { say "error: pip install of the peers failed (see $LOG)"; FAILED=1; }
    # FFCV builds a C++ extension against OpenCV and libturbojpeg.
    missing=()
    for p in "${APT_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then
        say "apt-get install ${missing[*]} (for FFCV's extension) ..."
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >>"$LOG" 2>&1 ||
            say "warning: apt-get install failed; FFCV will probably not build"
    fi
    say "pip install ${FFCV_PINS[*]} ..."
    "$VENV/bin/pip" install -q -c "$VENV/constraints.txt" "${FFCV_PINS[@]}" >>"$LOG" 2>&1 ||
        say "warning: FFCV could not be installed (see $LOG); its rows will say why"
    if [ "$FAILED" = 0 ]; then
        printf '%s\nmade %s in %d s\n' "$WANT" "$(date '+%F %T')" "$(( $(date +%s) - T0 ))" > "$STAMP"
    fi
    say "venv setup took $(( $(date +%s) - T0 )) s"
fi
export TF_CPP_MIN_LOG_LEVEL=2
importable() {  # importable NAME MODULES  -> adds NAME to SKIP with the reason when not
    local err
    if ! err=$("$PY" -c "import $2" 2>&1); then
        err=$(printf '%s' "$err" | tail -1 | tr -d '"|' | cut -c1-160)
        say "warning: $1 unavailable: $err"
        SKIP+=(--skip "$1=cannot import $2: $err")
        return 1
    fi
}
for s in dali-file dali-tfrecord; do importable "$s" nvidia.dali; done
importable tf-data tensorflow
importable wds-dataloader webdataset
FFCV_OK=1
importable ffcv "ffcv.loader, ffcv.writer" || FFCV_OK=0
VERSIONS=$("$PY" - <<'EOF' 2>/dev/null
import importlib
out = []
for name, mod in [("torch", "torch"), ("torchvision", "torchvision"), ("numpy", "numpy"),
                  ("Pillow", "PIL"), ("DALI", "nvidia.dali"), ("tensorflow-cpu", "tensorflow"),
                  ("webdataset", "webdataset"), ("ffcv", "ffcv"), ("numba", "numba"), ("opencv", "cv2")]:
    try:
        m = importlib.import_module(mod)
        try:  # the installed distribution's version (ffcv's __version__ is stale)
            from importlib.metadata import version
            v = version({"DALI": "nvidia-dali-cuda130", "opencv": "opencv-python"}.get(name, name))
        except Exception:
            v = getattr(m, "__version__", "?")
        out.append("%s %s" % (name, v))
    except Exception:
        out.append("%s missing" % name)
print(", ".join(out))
EOF
)
say "versions: $VERSIONS"

# ---- 2. chute ------------------------------------------------------------
step "chute"
CHUTE=build/chute
if [ "$BUILD" = 1 ]; then
    { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$CORES"; } >>"$LOG" 2>&1 ||
        say "error: building chute failed (see $LOG)"
fi
if [ -x "$CHUTE" ]; then say "chute: $CHUTE ($("$CHUTE" version 2>/dev/null | head -1))"; else
    SKIP+=(--skip "chute-shards=no $CHUTE" --skip "chute-tree=no $CHUTE"); FAILED=1; fi
[ -x "$CHUTE" ] || SKIP+=(--skip "chute-tfrecord=no $CHUTE" --skip "chute-wds=no $CHUTE")
if [ "$BUILD" = 1 ] || ! ls python/chute/_chute*.so >/dev/null 2>&1; then
    /usr/bin/python3 setup.py build_ext --inplace >>"$LOG" 2>&1 || say "error: chute's extension did not build"
fi
if ! PYTHONPATH=python "$PY" -c 'import chute' 2>>"$LOG"; then
    SKIP+=(--skip "chute-py-shards=cannot import chute" --skip "chute-py-tree=cannot import chute"); FAILED=1
fi

# ---- 3. dataset and formats -----------------------------------------------
step "dataset ($IMAGES images) and each system's format"
/usr/bin/python3 bench/make_dataset.py "$DATA/tree" --images "$IMAGES" --classes 10 2>&1 | tail -2 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" = 0 ] || { say "error: bench/make_dataset.py failed"; exit 1; }
newer() { [ -e "$1" ] && [ "$1" -nt "$DATA/tree.stamp" ]; }
if [ -x "$CHUTE" ]; then
    if newer "$DATA/shards/chute.manifest" && [ "$DATA/shards/chute.manifest" -nt "$CHUTE" ]; then
        say "chute shards: up to date"
    else
        rm -rf "$DATA/shards"
        "$CHUTE" pack "$DATA/tree" "$DATA/shards" 2>&1 | tail -1 | tee -a "$LOG"
    fi
fi
convert() {  # convert FORMAT SYSTEMS...
    local fmt=$1; shift
    if newer "$DATA/$fmt"; then say "$fmt: up to date"; return 0; fi
    if ! "$PY" bench/peers/peers.py convert "$fmt" "$DATA/tree" "$DATA/$fmt" 2>>"$LOG" | tee -a "$LOG"; then
        say "error: converting to $fmt failed (see $LOG)"
        for s in "$@"; do SKIP+=(--skip "$s=converting to $fmt failed"); done
        FAILED=1
    fi
}
# chute-tfrecord / chute-wds read these same files (the peers' writers'
# output), so every TFRecord and WebDataset row reads identical bytes.
convert tfrecord tf-data dali-tfrecord chute-tfrecord
convert wds wds-dataloader chute-wds
if [ "$FFCV_OK" = 1 ]; then convert ffcv ffcv; fi

# ---- 4. page cache ----------------------------------------------------------
step "page cache: reading every file once"
DIRS=()
for d in tree shards tfrecord wds ffcv; do [ -d "$DATA/$d" ] && DIRS+=("$DATA/$d"); done
find "${DIRS[@]}" -type f -print0 | xargs -0 cat > /dev/null
RES=$(find "${DIRS[@]}" -type f -print0 | xargs -0 fincore -b -n -r -o PAGES,SIZE 2>/dev/null |
    awk -v ps="$(getconf PAGESIZE)" '{r += $1; s += int(($2 + ps - 1) / ps)}
        END {if (s > 0) printf "%.1f", 100 * r / s; else print "?"}')
say "resident in the page cache: ${RES}% of all pages of ${DIRS[*]}"

# ---- 5, 6. measure and report -------------------------------------------------
step "measuring ($CORES cores, batch 256, $EPOCHS epochs per system)"
CTX=$OUT/context.json
"$PY" - "$CTX" <<EOF
import json, subprocess, sys, time
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p' | head -1", shell=True,
                     capture_output=True, text=True).stdout.strip()
json.dump({"date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpu": cpu, "quick": $QUICK == 1,
           "images": $IMAGES, "classes": 10, "versions": """$VERSIONS""",
           "resident": ": ${RES}% of their pages resident"}, open(sys.argv[1], "w"))
EOF
"$PY" bench/peers/peers.py drive --data "$DATA" --out "$OUT" --workers "$CORES" --epochs "$EPOCHS" \
    --timeout "$TIMEOUT" --context "$CTX" "${SKIP[@]}" || FAILED=1
if [ -f "$OUT/results.md" ]; then
    cp "$OUT/results.md" bench/peers/results.md
    say "written to bench/peers/results.md (records: $OUT/records.jsonl, log: $OUT/peers.log)"
fi
say "total time: $(( $(date +%s) - T_START )) s"
exit "$FAILED"
