#!/usr/bin/env bash
# test_cluster.sh — the cluster-engine tier: pytest tests/cluster (Spark,
# Ray) in the venv of scripts/cluster_venv.sh (pinned pyspark, ray,
# pyarrow; made once, then reused).  The chute package is built from the
# checkout by tests/cluster/conftest.py, as tests/python does.  The s3://
# cases use tests/test_remote.py's SeaweedFS (fetched once into
# $CHUTE_REMOTE_TOOLS); they skip, saying why, where it cannot be had.
#   usage: bash scripts/test_cluster.sh [pytest args]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
t0=$(date +%s)
PY="$(bash scripts/cluster_venv.sh)"
echo "cluster venv ready in $(( $(date +%s) - t0 )) s: $PY"
export CHUTE_REMOTE_TOOLS="${CHUTE_REMOTE_TOOLS:-$ROOT/build-python/remote-tools}"
"$PY" -m pytest -q -rfEs -p no:cacheprovider tests/cluster "$@"
echo "cluster tier: $(( $(date +%s) - t0 )) s in all"
