#!/bin/sh
# test_spark.sh — python/ragtag_spark on PySpark (PyPI) in local mode,
# local[3]: lenet on Fashion-MNIST from a DataFrame with 2 workers in a
# barrier stage must reach the test accuracy of `ragtag train --workers 2`
# on the same images and seed (within 0.5 points), with the replica hash
# line in the returned log; a missing executor binary and a version
# mismatch fail with their errors; workers run a shipped tree (ship=); a
# bad model file fails with the coordinator's reason; a killed worker is
# lost and the run goes on, and a run that lost every worker resumes from
# its checkpoint (tests/spark_check.py). PySpark goes into a cached venv
# ($RAGTAG_SPARK_VENV, default ~/.cache/ragtag/pyspark-venv). Skips, saying
# why, without Java (openjdk-17-jre-headless), python3-venv or PySpark.
# Ports: a free block of 50 in 15600-15999.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
export top_srcdir
RAGTAG=${RAGTAG:-$top_builddir/src/ragtag}
skip() { echo "SKIP: $*"; exit 77; }
"$RAGTAG" coord --help 2>&1 | grep -q -- '--serve-data' || skip "ragtag built without ZeroMQ: no coord"
command -v java >/dev/null 2>&1 || skip "no Java: apt-get install openjdk-17-jre-headless"
venv=${RAGTAG_SPARK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ragtag/pyspark-venv}
if ! "$venv/bin/python" -c 'import pyspark' 2>/dev/null; then
  python3 -m venv "$venv" >/dev/null 2>&1 || skip "python3 -m venv $venv failed (apt-get install python3-venv)"
  "$venv/bin/pip" install -q pyspark >"$venv.log" 2>&1 ||
    skip "pip install pyspark failed (no network?): $(tail -1 "$venv.log")"
fi

tmp=$(mktemp -d /tmp/ragtag-spark.XXXXXX)
trap '[ -n "${RAGTAG_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
model=$top_srcdir/examples/lenet.cfg

# the peer: the same images (the first 6000), seed and threads, 2 local workers
"$RAGTAG" train "$model" --workers 2 --threads 1 --epochs 1 --limit 6000 --seed 3 \
  --progress off --metrics "$tmp/base.jsonl" >"$tmp/base.log" 2>&1 ||
  { cat "$tmp/base.log"; echo "not ok - ragtag train --workers 2"; exit 1; }
base=$(sed -n 's/.*"test_acc": \([0-9.]*\).*/\1/p' "$tmp/base.jsonl" | tail -1)
base=$(awk "BEGIN { print $base * 100 }")
echo "ok - ragtag train --workers 2: test accuracy $base%"

# a "ragtag" of another version, for the mismatch
mkdir -p "$tmp/old"
printf '#!/bin/sh\necho "ragtag 0.0.1"\n' >"$tmp/old/ragtag"
chmod 755 "$tmp/old/ragtag"

# a tree to ship to the executors, laid out as `make install` lays it out
# (bin/ragtag, lib/libragtag.so*), from the build tree
mkdir -p "$tmp/tree/bin" "$tmp/tree/lib"
bindir=$(dirname "$RAGTAG")
if [ -f "$bindir/.libs/ragtag" ]; then
  cp "$bindir/.libs/ragtag" "$tmp/tree/bin/ragtag"
  cp -P "$top_builddir"/.libs/libragtag.so* "$tmp/tree/lib/"
else
  cp "$RAGTAG" "$tmp/tree/bin/ragtag"  # a static build (--disable-shared)
fi

# executors find ragtag on the PATH (as installed on a cluster). Ports: a
# free block of 50 in 15600-15999, below Linux's ephemeral range
# (32768-60999): in it an outgoing connection of Spark's or a worker's own
# took a worker's --ring-port once (CI, "Address already in use").
PATH=$(dirname "$RAGTAG"):$PATH "$venv/bin/python" "$top_srcdir/tests/spark_check.py" \
  "$RAGTAG" "$model" "$tmp" "$base" 15600 15999 2>"$tmp/spark.err"
rc=$?
[ $rc = 0 ] || grep -v '^\s*at ' "$tmp/spark.err" | tail -30
exit $rc
