#!/usr/bin/env bash
# bench/formats.sh — issue #12's benches in one command: HDF5 (bench/hdf5.py:
# chute vs h5py + DataLoader, and HDF5's lock in situ; bench/hdf5_lock.c:
# H5Dread vs pread from T threads, the lock alone) and uncompressed images
# (bench/uncompressed.py: BMP and PNG level 0 vs JPEG on the train transform).
#
#   bash bench/formats.sh [--images N] [--no-build] [--only hdf5|uncompressed|audio]
#
# Builds chute (Release) and the Python package into build-python/lib-bench,
# makes the ImageNet-like JPEG tree of bench/run.sh (bench/make_dataset.py)
# under bench/data/formats-<N>/, then runs both scripts.  --images 32 is a
# smoke test (seconds), not a figure.
set -u -o pipefail
IMAGES=2000
BUILD=1
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        *) echo "formats.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
CORES=$(nproc)
DATA=bench/data/formats-$IMAGES
LIB=build-python/lib-bench
mkdir -p "$DATA" || exit 1
if [ "$BUILD" = 1 ]; then
    echo "== build (log in $DATA/build.log)"
    { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$CORES" &&
      "$PY" setup.py -q build --build-lib "$LIB"; } >"$DATA/build.log" 2>&1 ||
        { echo "formats.sh: build failed; see $DATA/build.log" >&2; exit 1; }
fi
"$PY" bench/make_dataset.py "$DATA/tree" --images "$IMAGES" --classes 10 ||
    { echo "formats.sh: bench/make_dataset.py failed" >&2; exit 1; }
export PYTHONPATH="$LIB${PYTHONPATH:+:$PYTHONPATH}"
# build/chute and the package in $LIB are one build unless --no-build kept an
# old one: say so when their library features differ (libdeflate or zlib
# alone moves the gzip HDF5 row's CPU by ~1.6x).
if [ -x build/chute ]; then
    cli_f=$(build/chute version | sed -n 's/^features: //p' | tr ' ' '\n' |
            grep -vxE 'io_uring|nvml' | sort | tr '\n' ' ')
    py_f=$("$PY" -c 'from chute import _chute; print("\n".join(_chute.features().split()))' |
           sort | tr '\n' ' ')
    [ "$cli_f" = "$py_f" ] ||
        echo "formats.sh: warning: build/chute has features [$cli_f] but the Python package in $LIB has [$py_f]: not one build (run without --no-build)" >&2
fi
rc=0
if [ -z "$ONLY" ] || [ "$ONLY" = hdf5 ]; then
    "$PY" bench/hdf5.py "$DATA/tree" --images "$IMAGES" || rc=1
    if [ -x build/tests/hdf5_lock ]; then
        cat "$DATA/tree.h5/raw.h5" >/dev/null  # page cache: measure the lock, not the disk
        build/tests/hdf5_lock "$DATA/tree.h5/raw.h5" images 2000 "$CORES" || rc=1
    fi
fi
if [ -z "$ONLY" ] || [ "$ONLY" = uncompressed ]; then
    "$PY" bench/uncompressed.py "$DATA/tree" --images "$IMAGES" || rc=1
fi
if [ -z "$ONLY" ] || [ "$ONLY" = audio ]; then
    "$PY" bench/audio.py --workers "$CORES" || rc=1   # WAV: chute vs soundfile + DataLoader
fi
exit $rc
