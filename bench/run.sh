#!/usr/bin/env bash
# bench/run.sh — the loader benchmark, one command.
#
#   bash bench/run.sh [--quick] [--images N] [--no-build] [--chute PATH]
#
# Builds chute (Release), makes an ImageNet-like JPEG tree from the photos
# installed on this machine, packs it into chute shards, then measures on
# the same cores, one system after another:
#
#   chute-shards      build/chute bench SHARDS            (the headline number)
#   chute-tree        build/chute bench TREE              (same, from loose files)
#   chute-tfrecord    build/chute bench TFRECORD          (train only: the shards'
#   chute-wds         build/chute bench WDS                images, chute convert-ed)
#   torch-dataloader  torchvision ImageFolder + DataLoader, num_workers = cores
#   decode-*          libjpeg-turbo decode only, all cores, files in memory
#
# for the train transform and again for eval, and writes a markdown table
# (images/s, ratio to chute-shards, the issue's two target ratios) to the
# terminal and to bench/results.md.  See bench/README.md for what each
# number means.
#
# Everything it makes lives under bench/data/ (git-ignored):
#   full run:  bench/data/tree, bench/data/shards, bench/data/run/
#   --quick:   bench/data/quick/tree, .../shards, .../run/  (1500 images,
#              fewer epochs, shorter ceiling runs; a few minutes in all)
# The tree is rebuilt only when its parameters change; the shards only when
# the tree or build/chute is newer than them.  A failing step is reported,
# the systems that do not depend on it still run, and the exit status is
# nonzero.
set -u -o pipefail

usage() {
    echo "usage: bash bench/run.sh [--quick] [--images N] [--no-build] [--chute PATH]"
    echo "  --quick      1500 images, fewer epochs (a few minutes)"
    echo "  --images N   dataset size (default 4000, or 1500 with --quick)"
    echo "  --no-build   use the existing build/chute as it is"
    echo "  --chute PATH use this chute binary (implies --no-build)"
}

QUICK=0
BUILD=1
IMAGES=""
CHUTE=build/chute
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --no-build) BUILD=0 ;;
        --chute)
            [ $# -ge 2 ] || { echo "run.sh: --chute needs a path" >&2; exit 2; }
            CHUTE=$2
            BUILD=0
            shift ;;
        --images)
            [ $# -ge 2 ] || { echo "run.sh: --images needs a number" >&2; exit 2; }
            IMAGES=$2
            shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

cd "$(dirname "$0")/.." || exit 1
ROOT_DIR=$(pwd)
PY=/usr/bin/python3
CORES=$(nproc)
DC=bench/data/bin/decode_ceiling
if [ "$QUICK" = 1 ]; then
    DATA=bench/data/quick
    IMAGES=${IMAGES:-1500}
    CHUTE_EPOCHS=2
    TORCH_EPOCHS=2
    DC_SECONDS=2
else
    DATA=bench/data
    IMAGES=${IMAGES:-4000}
    CHUTE_EPOCHS=3
    TORCH_EPOCHS=2
    DC_SECONDS=4
fi
case "$IMAGES" in
    ''|*[!0-9]*) echo "run.sh: --images must be a positive number" >&2; exit 2 ;;
esac
CLASSES=10
TREE=$DATA/tree
SHARDS=$DATA/shards
TFRECORD=$DATA/tfrecord-chute  # the shards' samples as TFRecord (chute convert; bench/peers
                               # uses $DATA/tfrecord, written by TensorFlow)
WDS=$DATA/wds-chute            # ... and as WebDataset tars
OUT=$DATA/run
LOG=$OUT/run.log
RECORDS=$OUT/records.jsonl
RESULTS=bench/results.md
mkdir -p "$OUT" bench/data/bin || exit 1
rm -f "$OUT"/*.out "$OUT/context.json" "$OUT/results.md"
: > "$LOG"
: > "$RECORDS"
FAILED=0
CHUTE_ERR=""

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
step() { printf '\n== %s\n' "$*" | tee -a "$LOG"; }
fail() { FAILED=1; printf 'run.sh: error: %s\n' "$*" | tee -a "$LOG" >&2; }
die() { fail "$@"; exit 1; }

say "chute benchmark: $IMAGES images, $CORES cores, data in $DATA, log in $LOG"
T_START=$(date +%s)

# ---- prerequisites ------------------------------------------------------
[ -x "$PY" ] || die "$PY not found (Debian's python3 with python3-pil, python3-numpy, python3-torch)"
"$PY" -c 'import PIL, numpy' 2>>"$LOG" ||
    die "$PY cannot import PIL and numpy: apt-get install python3-pil python3-numpy"
TORCH_ERR=""
"$PY" -c 'import torch, torchvision' 2>>"$LOG" ||
    TORCH_ERR="$PY cannot import torch/torchvision (apt-get install python3-torch python3-torchvision)"
[ -n "$TORCH_ERR" ] && fail "$TORCH_ERR; the torch rows will be missing"
command -v cc >/dev/null || die "no C compiler (cc) for bench/decode_ceiling.c"

# ---- build ------------------------------------------------------------
step "build"
if [ "$BUILD" = 1 ]; then
    if ! command -v cmake >/dev/null; then
        CHUTE_ERR="cmake not found"
    elif [ ! -f CMakeLists.txt ]; then
        CHUTE_ERR="no CMakeLists.txt at $ROOT_DIR"
    elif ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release &&
             cmake --build build -j"$CORES"; } >>"$LOG" 2>&1; then
        CHUTE_ERR="building chute failed (cmake output in $LOG)"
    fi
fi
if [ -z "$CHUTE_ERR" ] && [ ! -x "$CHUTE" ]; then
    if [ "$BUILD" = 1 ]; then
        CHUTE_ERR="$CHUTE does not exist after the build"
    else
        CHUTE_ERR="$CHUTE not found or not executable"
    fi
fi
BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' build/CMakeCache.txt 2>/dev/null)
if [ -n "$CHUTE_ERR" ]; then
    fail "$CHUTE_ERR; the chute rows will be missing"
else
    say "chute: $CHUTE ($("$CHUTE" version 2>/dev/null | head -1), build type '${BUILD_TYPE:-unknown}')"
    [ "$BUILD_TYPE" = Release ] ||
        say "warning: build/ is not a Release build; chute's numbers will be low"
fi
if [ ! -x "$DC" ] || [ bench/decode_ceiling.c -nt "$DC" ]; then
    cc -O2 -o "$DC" bench/decode_ceiling.c -ljpeg -lpthread 2>>"$LOG" ||
        die "compiling bench/decode_ceiling.c failed (needs libjpeg62-turbo-dev; see $LOG)"
fi
say "decode ceiling: $DC"

# ---- dataset ----------------------------------------------------------
step "dataset"
"$PY" bench/make_dataset.py "$TREE" --images "$IMAGES" --classes "$CLASSES" 2>&1 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" = 0 ] || die "bench/make_dataset.py failed"

step "pack"
if [ -z "$CHUTE_ERR" ]; then
    if [ -f "$SHARDS/chute.manifest" ] && [ "$SHARDS/chute.manifest" -nt "$TREE.stamp" ] &&
       [ "$SHARDS/chute.manifest" -nt "$CHUTE" ]; then
        say "shards in $SHARDS are newer than the tree and $CHUTE; not repacking"
    else
        rm -rf "$SHARDS"
        if ! "$CHUTE" pack "$TREE" "$SHARDS" 2>&1 | tee -a "$LOG" | tail -3; then
            CHUTE_ERR="chute pack failed (see $LOG)"
            fail "$CHUTE_ERR"
        elif [ ! -f "$SHARDS/chute.manifest" ]; then
            CHUTE_ERR="chute pack left no $SHARDS/chute.manifest"
            fail "$CHUTE_ERR"
        fi
    fi
else
    say "skipped: $CHUTE_ERR"
fi

# The same samples as the shards, in TFRecord and WebDataset (train
# images/s from these against chute-shards: target >= 0.95).
step "convert"
convert_to() {  # convert_to FORMAT DIR
    if [ -n "$(ls -A "$2" 2>/dev/null)" ] && [ "$2" -nt "$SHARDS/chute.manifest" ] &&
       [ "$2" -nt "$CHUTE" ]; then
        say "$2 is newer than the shards and $CHUTE; not converting"
    else
        rm -rf "$2"
        if ! "$CHUTE" convert "$SHARDS" "$2" --format "$1" 2>&1 | tee -a "$LOG" | tail -3; then
            fail "chute convert --format $1 failed (see $LOG)"
            rm -rf "$2"
        else
            touch "$2"
        fi
    fi
}
if [ -z "$CHUTE_ERR" ]; then
    convert_to tfrecord "$TFRECORD"
    convert_to wds "$WDS"
else
    say "skipped: $CHUTE_ERR"
fi

# ---- warm the page cache ----------------------------------------------
# Every system reads from memory: the tree was just written (or read on a
# previous run) and the shards just packed, and both are read once here.
step "page cache"
WARM=("$TREE")
[ -d "$SHARDS" ] && WARM+=("$SHARDS")
[ -d "$TFRECORD" ] && WARM+=("$TFRECORD")
[ -d "$WDS" ] && WARM+=("$WDS")
find "${WARM[@]}" -type f -print0 | xargs -0 cat > /dev/null
resident_pct() {  # share of the files' pages that are in the page cache
    [ -d "$1" ] || { echo null; return; }
    find "$1" -type f -print0 | xargs -0 fincore -b -n -r -o PAGES,SIZE 2>/dev/null |
        awk -v ps="$(getconf PAGESIZE)" '{r += $1; s += int(($2 + ps - 1) / ps)}
            END {if (s > 0) printf "%.1f", 100 * r / s; else print "null"}'
}
TREE_RES=$(resident_pct "$TREE")
SHARDS_RES=$(resident_pct "$SHARDS")
say "resident in page cache: tree ${TREE_RES}%, shards ${SHARDS_RES}%"
LOADAVG=$(cut -d' ' -f1 /proc/loadavg)
say "load average before the runs: $LOADAVG"

# ---- measuring -----------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
# user+sys seconds of all waited-for children (descendants included), from
# the shell's `times`; it must run in this shell, not in a $(...) subshell.
children_cpu() {
    { times; } > "$OUT/.times"
    CHILD_CPU=$(tail -1 "$OUT/.times" | awk '{
        t = 0
        for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] }
        printf "%.3f", t }')
}

# record TABLE LABEL SETTINGS RC JSON WALL BUSY OTHER [WHY [ATTEMPTS]]
record() {
    local why=${9:-} attempts=${10:-1}
    why=${why//\\/}
    why=${why//\"/\'}
    printf '{"table":"%s","label":"%s","settings":"%s","rc":%d,"wall_s":%s,"busy_cores":%s,"other_cores":%s,"attempts":%d,"why":"%s","result":%s}\n' \
        "$1" "$2" "$3" "$4" "$6" "$7" "$8" "$attempts" "$why" "$5" >> "$RECORDS"
}

# A run during which something else used more than this many cores is
# repeated (at most MAX_ATTEMPTS runs in all) and the least disturbed run
# is kept; the report shows its "other load" and the number of attempts.
OTHER_LIMIT=0.10
MAX_ATTEMPTS=3

# measure TABLE LABEL SETTINGS COMMAND...  (runs it, keeps its JSON line)
measure() {
    local table=$1 label=$2 settings=$3
    shift 3
    local outf="$OUT/$table.$label.out"
    printf '   %-18s ' "$label"
    local attempt=0 b0 b1 t0 t1 c0 c1 rc json wall busy other
    local best_json="" best_wall="" best_busy="" best_other=""
    while [ "$attempt" -lt "$MAX_ATTEMPTS" ]; do
        attempt=$((attempt + 1))
        printf -- '-- %s / %s (attempt %d): %s\n' "$table" "$label" "$attempt" "$*" >> "$LOG"
        children_cpu; c0=$CHILD_CPU; b0=$(busy_ticks); t0=$(date +%s.%N)
        "$@" > "$outf" 2>> "$LOG"
        rc=$?
        t1=$(date +%s.%N); b1=$(busy_ticks); children_cpu; c1=$CHILD_CPU
        cat "$outf" >> "$LOG"
        json=$(grep '^{.*"images_per_sec"' "$outf" | tail -1)
        if [ "$rc" = 0 ] && [ -z "$json" ]; then rc=1; fi
        wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
        busy=$(awk -v x="$((b1 - b0))" -v hz="$CLK_TCK" -v w="$wall" 'BEGIN {printf "%.2f", x / hz / w}')
        other=$(awk -v x="$((b1 - b0))" -v hz="$CLK_TCK" -v c="$c0" -v d="$c1" -v w="$wall" \
            'BEGIN {o = (x / hz - (d - c)) / w; if (o < 0) o = 0; printf "%.2f", o}')
        [ "$rc" = 0 ] || break
        if [ -z "$best_json" ] || awk -v a="$other" -v b="$best_other" 'BEGIN {exit !(a < b)}'; then
            best_json=$json best_wall=$wall best_busy=$busy best_other=$other
        fi
        awk -v o="$other" -v l="$OTHER_LIMIT" 'BEGIN {exit !(o > l)}' || break
        printf -- '-- disturbed: other load %s cores\n' "$other" >> "$LOG"
        if [ "$attempt" -lt "$MAX_ATTEMPTS" ]; then
            printf '(disturbed: other load %s cores; again) ' "$other"
        else
            printf '(disturbed: other load %s cores) ' "$other"
        fi
    done
    if [ "$rc" != 0 ]; then
        FAILED=1
        record "$table" "$label" "$settings" "$rc" null "$wall" "$busy" "$other" \
            "exit status $rc; see $LOG"
        printf 'FAILED (exit %s; see %s)\n' "$rc" "$LOG" | tee -a "$LOG"
    else
        record "$table" "$label" "$settings" 0 "$best_json" "$best_wall" "$best_busy" \
            "$best_other" "" "$attempt"
        printf '%s images/s\n' "$(printf '%s' "$best_json" | "$PY" -c \
            'import json,sys; print(json.load(sys.stdin)["images_per_sec"])')"
    fi
}

skipped() {  # skipped TABLE LABEL SETTINGS REASON
    FAILED=1
    printf '   %-18s skipped: %s\n' "$2" "$4" | tee -a "$LOG"
    record "$1" "$2" "$3" 127 null 0 null null "not run: $4"
}

run_table() {
    local tf=$1 scaled_size=$2
    step "$tf transform"
    local cs="\`chute bench --transform $tf --workers $CORES --epochs $CHUTE_EPOCHS\`, batch 256, 224, float32 NCHW"
    if [ -n "$CHUTE_ERR" ]; then
        skipped "$tf" chute-shards "$cs" "$CHUTE_ERR"
        skipped "$tf" chute-tree "$cs" "$CHUTE_ERR"
    else
        measure "$tf" chute-shards "$cs on the shards" \
            "$CHUTE" bench "$SHARDS" --transform "$tf" --workers "$CORES" --epochs "$CHUTE_EPOCHS" --json
        if [ "$tf" = train ]; then
            local fmt dir
            for fmt in tfrecord wds; do
                dir=$TFRECORD
                [ "$fmt" = wds ] && dir=$WDS
                if [ -d "$dir" ]; then
                    measure "$tf" "chute-$fmt" "$cs on the shards' samples as $fmt" \
                        "$CHUTE" bench "$dir" --format "$fmt" --transform "$tf" --workers "$CORES" \
                        --epochs "$CHUTE_EPOCHS" --json
                else
                    skipped "$tf" "chute-$fmt" "$cs" "no $dir (chute convert failed)"
                fi
            done
        fi
        measure "$tf" chute-tree "$cs on the tree" \
            "$CHUTE" bench "$TREE" --transform "$tf" --workers "$CORES" --epochs "$CHUTE_EPOCHS" --json
    fi
    local ts="ImageFolder + DataLoader, $CORES workers, batch 256, $TORCH_EPOCHS epochs, first $CORES batches untimed"
    if [ -n "$TORCH_ERR" ]; then
        skipped "$tf" torch-dataloader "$ts" "$TORCH_ERR"
    else
        measure "$tf" torch-dataloader "$ts" \
            "$PY" bench/torch_baseline.py "$TREE" --transform "$tf" --workers "$CORES" --epochs "$TORCH_EPOCHS"
    fi
    measure "$tf" decode-full "libjpeg-turbo full size to RGB, ISLOW, $CORES threads, files in memory" \
        "$DC" --mode full --threads "$CORES" --seconds "$DC_SECONDS" "$TREE"
    measure "$tf" decode-scaled "cheapest M/8 (M=1,2,4,8) keeping the shorter side >= $scaled_size, $CORES threads" \
        "$DC" --mode scaled --size "$scaled_size" --threads "$CORES" --seconds "$DC_SECONDS" "$TREE"
    if [ "$tf" = train ]; then
        measure "$tf" decode-crop "RandomResizedCrop window only, cheapest M/8 keeping it >= 224, $CORES threads" \
            "$DC" --mode crop --size 224 --threads "$CORES" --seconds "$DC_SECONDS" "$TREE"
    fi
}

run_table train 224
# eval resizes the shorter side to 256 before its centre crop, so that is
# what a scaled decode must keep.
run_table eval 256

# ---- report ---------------------------------------------------------------
step "report"
CHUTE_VERSION=null
[ -z "$CHUTE_ERR" ] &&
    CHUTE_VERSION="\"$("$CHUTE" version 2>/dev/null | head -1 | sed 's/^chute //' | tr -d '"\\')\""
"$PY" - "$OUT/context.json" <<EOF
import json, os, platform, subprocess, sys, time
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""
cpu = sh("lscpu | sed -n 's/^Model name: *//p' | head -1") or platform.processor()
try:
    import torch, torchvision
    tv = "torch %s, torchvision %s, Pillow %s" % (torch.__version__, torchvision.__version__,
                                                 __import__("PIL").__version__)
except Exception:
    tv = "torch not available"
try:
    ds = json.load(open("$TREE.stamp")).get("summary")
except (OSError, ValueError):
    ds = None
json.dump({
    "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    "quick": "$QUICK" == "1",
    "cpu": cpu, "cores": $CORES, "kernel": "Linux " + platform.release(),
    "cc": sh("cc --version | head -1"),
    "libjpeg": sh("dpkg-query -W -f '\${Version}' libjpeg62-turbo 2>/dev/null") or "?",
    "torch": tv, "chute_version": json.loads('$CHUTE_VERSION'), "build_type": "${BUILD_TYPE:-unknown}",
    "tree": "$TREE", "shards": "$SHARDS", "classes": $CLASSES, "dataset": ds,
    "tree_resident_pct": json.loads("$TREE_RES"), "shards_resident_pct": json.loads("$SHARDS_RES"),
    "loadavg": "$LOADAVG", "log": "$LOG",
    "other_limit": $OTHER_LIMIT, "max_attempts": $MAX_ATTEMPTS,
}, open(sys.argv[1], "w"), indent=1)
EOF
[ -f "$OUT/context.json" ] || fail "could not write $OUT/context.json (see the error above)"
if [ -f "$OUT/context.json" ] && "$PY" bench/report.py "$RECORDS" "$OUT/context.json" > "$OUT/results.md" 2>>"$LOG"; then
    cp "$OUT/results.md" "$RESULTS"
    echo
    cat "$RESULTS"
    say "written to $RESULTS (records: $RECORDS, log: $LOG)"
else
    fail "bench/report.py failed (see $LOG)"
fi
say "total time: $(( $(date +%s) - T_START )) s"
if [ "$FAILED" != 0 ]; then
    echo "run.sh: some steps failed; see the messages above and $LOG" >&2
    exit 1
fi
exit 0
