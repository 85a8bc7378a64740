#!/bin/sh
# bench_spark.sh — ragtag launched by python/ragtag_spark on PySpark local[3]
# next to `ragtag train --workers 2`, interleaved in one run: seconds from
# run(...) to the first step, and images/s (bench/README.md has figures).
#   bench/bench_spark.sh [REPS [EPOCHS [LIMIT]]]      (default 3 3 12000)
# Needs Java (openjdk-17-jre-headless) and PySpark in the venv that
# tests/test_spark.sh makes ($RAGTAG_SPARK_VENV, ~/.cache/ragtag/pyspark-venv).
# Ports 55500-55540.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
RAGTAG=${RAGTAG:-$top/src/ragtag}
venv=${RAGTAG_SPARK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ragtag/pyspark-venv}
command -v java >/dev/null || { echo "no Java: apt-get install openjdk-17-jre-headless"; exit 1; }
if ! "$venv/bin/python" -c 'import pyspark' 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q pyspark
fi
PATH=$(dirname "$RAGTAG"):$PATH exec "$venv/bin/python" "$top/bench/bench_spark.py" \
  "$RAGTAG" "$top/examples/lenet.cfg" "${1:-3}" "${2:-3}" "${3:-12000}" 2>/dev/null
