#!/usr/bin/env bash
# bench/gpu/prepare_carry.sh — run HERE (a machine with network), once, before
# bench/gpu/device_run.sh is run on a GPU machine that has no network (the
# device tool's H100: Python 3.12, torch cu13, nvcc, cmake; no libjpeg
# headers, no nvJPEG, no DALI).  Fills two git-ignored folders the run
# carries:
#   .whl/   the nvidia-nvjpeg wheel for CUDA 13 (chute's GPU decode, dlopened)
#   .debs/  libjpeg-turbo's runtime and headers (chute's build needs them)
# DALI's wheel (~500 MB) is over the device tool's 64 MiB carry limit, so the
# dali mode reports "DALI not installed" there; run it on a host with network.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
EXCL="$(git rev-parse --git-common-dir)/info/exclude"
for d in /.whl/ /.debs/; do grep -qxF "$d" "$EXCL" 2>/dev/null || echo "$d" >> "$EXCL"; done
mkdir -p .whl .debs
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  "nvidia-nvjpeg>=13,<14"
(cd .debs && apt-get download libjpeg62-turbo libjpeg62-turbo-dev)
du -sh .whl .debs
