#!/usr/bin/env bash
# bench/gpu/device_run.sh — the whole GPU benchmark in one command on a bare
# GPU machine without network (see bench/gpu/README.md for the device-tool
# call that carries .whl and .debs made by prepare_carry.sh).
#
#   1. unpack the carried libjpeg-turbo into /tmp/deps and nvidia-nvjpeg
#      into /tmp/site (nothing is written outside /tmp);
#   2. build the chute package with its CUDA module (setup.py -> CMake, nvcc
#      from the machine) into /tmp/chute-lib;
#   3. make a synthetic ImageFolder tree of JPEGs with PIL (N images,
#      500x375 q90 like ImageNet's median, 10 classes) on local disk;
#   4. run chute's GPU tests (ctest -R 'cuda_gpu|nvjpeg_gpu') and
#      `python -m chute.doctor --model resnet50`, then
#      bench/gpu/train_resnet50.py with every mode, writing results.json
#      and the logs to $OUT (or ./bench-out).
# Environment: IMAGES (default 10000), STEPS (100), WARMUP (20), SHARE (30),
# MODES (train_resnet50.py's default).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/bench-out}
mkdir -p "$OUT"
IMAGES=${IMAGES:-10000}
exec > >(tee "$OUT/device_run.log") 2>&1
echo "== machine"; nvidia-smi -L; nproc; python3 --version
mkdir -p /tmp/deps /tmp/site
for f in "$ROOT"/.debs/*.deb; do [ -e "$f" ] && dpkg -x "$f" /tmp/deps; done
if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$ROOT"/.whl/*.whl
fi
ARCH=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
export CPATH=/tmp/deps/usr/include${CPATH:+:$CPATH}
export LIBRARY_PATH=/tmp/deps/usr/lib/$ARCH${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/$ARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CMAKE_PREFIX_PATH=/tmp/deps/usr
NVJ=$(find /tmp/site /usr/local/cuda*/lib64 /usr/lib/$ARCH -name 'libnvjpeg.so*' 2>/dev/null | head -1)
[ -n "$NVJ" ] && export CHUTE_NVJPEG=$NVJ
echo "== nvJPEG: ${NVJ:-not found (chute-nvjpeg will be skipped)}"

echo "== build"
cd "$ROOT"
python3 setup.py -q build --build-lib /tmp/chute-lib || { echo "build failed"; exit 1; }
export PYTHONPATH=/tmp/chute-lib:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import chute; print("chute", chute.__version__, chute.features())'

echo "== data: $IMAGES synthetic JPEGs"
python3 - "$IMAGES" <<'PY'
import os, sys
from multiprocessing import Pool
import numpy as np
from PIL import Image
N, ROOT = int(sys.argv[1]), "/tmp/bench-tree"

def make(i):
    d = os.path.join(ROOT, "c%02d" % (i % 10))
    p = os.path.join(d, "%06d.jpg" % i)
    if os.path.exists(p):
        return
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(i)
    yy, xx = np.mgrid[0:375, 0:500]
    a, b, c = (int(v) for v in rng.integers(1, 9, 3))
    img = np.stack([(xx * a + yy * b) % 256, (xx * c) % 256, (yy * a) % 256], -1)
    img = (img + rng.integers(0, 40, img.shape)).clip(0, 255).astype(np.uint8)
    Image.fromarray(img).save(p, quality=90)

with Pool(os.cpu_count()) as pool:
    pool.map(make, range(N), chunksize=64)
PY
echo "== GPU tests"
# The tests' fixture tree (tests/setup_data.py crops photos this machine
# lacks): 120 of the synthetic JPEGs in 3 classes instead.
mkdir -p /tmp/chute-build/tests/data/tree
for c in c00 c01 c02; do
  mkdir -p /tmp/chute-build/tests/data/tree/$c
  ls /tmp/bench-tree/$c | head -40 | while read -r f; do
    cp /tmp/bench-tree/$c/$f /tmp/chute-build/tests/data/tree/$c/; done
done
touch /tmp/chute-build/tests/data/READY
cmake -S . -B /tmp/chute-build -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build /tmp/chute-build -j16 >/dev/null &&
  (cd /tmp/chute-build && ctest --output-on-failure -R 'cuda_backend|cuda_gpu|nvjpeg_gpu' -V \
     | grep -E 'Test +#|GPU vs|nvJPEG|hybrid|skipped|Passed|Failed') | tee "$OUT/gpu_tests.txt"

echo "== doctor with a real ResNet-50 step"
python3 -m chute.doctor /tmp/bench-tree --batch 256 --workers 16 --steps 30 \
  --gpu-decode-share "${SHARE:-30}" | tee "$OUT/doctor.txt"

echo "== ResNet-50 training, every input pipeline"
python3 bench/gpu/train_resnet50.py --data /tmp/bench-tree --workers 16 \
  --steps "${STEPS:-100}" --warmup "${WARMUP:-20}" --gpu-decode-share "${SHARE:-30}" \
  ${MODES:+--modes "$MODES"} --out "$OUT/results.json"
