#!/usr/bin/env bash
# cluster_venv.sh — the venv the cluster-engine tests (Spark, Ray) run in.
#
# pyspark and ray are integrations, never chute's dependencies: they live
# in their own venv (build-cluster/venv), built from Debian's python3 (the
# interpreter the extension in build-python/ is built for) with versions
# pinned so a CI run months from now installs what was tested.  Spark
# runs on Debian's Java 17 runtime (default-jre-headless).
#   usage: bash scripts/cluster_venv.sh   (prints the venv's python)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
V="${CHUTE_CLUSTER_VENV:-$ROOT/build-cluster/venv}"
STAMP="$V/.chute-pins-2"
if [ ! -f "$STAMP" ]; then
  if ! command -v java >/dev/null 2>&1; then
    apt-get install -y -q default-jre-headless >&2
  fi
  rm -rf "$V"
  /usr/bin/python3 -m venv "$V" >&2
  "$V/bin/pip" install -q --disable-pip-version-check \
    "pyspark==3.5.8" "ray[data]==2.52.1" "numpy==1.26.4" "pyarrow==17.0.0" \
    "pandas==2.2.3" "pytest==8.3.4" "webdataset==1.0.2" "pillow==11.0.0" \
    "boto3==1.35.99" >&2
  touch "$STAMP"
fi
echo "$V/bin/python"
