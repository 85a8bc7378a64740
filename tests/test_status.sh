#!/bin/sh
# The coordinator's status page (docs/status.md), on a real 2-worker run
# with --http: /api/status lists every worker with a positive speed and
# shares that sum to the batch; /metrics, parsed by prometheus_client's
# text-format parser, says the same; hostile HTTP (oversized headers,
# unknown paths, too many requests, slow clients, hundreds of connections
# on 127.0.0.1) is bounded, the page keeps answering and the run trains on
# and ends with identical replicas.
set -u
RAGTAG=${RAGTAG:-$top_builddir/src/ragtag}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"; exit 77
fi
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c "import prometheus_client" 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "SKIP: no python3 with prometheus_client (apt-get install python3-prometheus-client)"; exit 77
fi
if "$RAGTAG" train x.cfg --workers 2 --http 1 2>&1 | grep -q "built without the status page"; then
  echo "SKIP: ragtag built without libmicrohttpd (apt-get install libmicrohttpd-dev)"; exit 77
fi
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
# Ports: 27000-27999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((27000 + ($$ % 97) * 10))
# 10 epochs: the run must outlast the checks (about 8 s) even where 2 lenet
# workers train 35,000 img/s (1.5 s an epoch); 4 were too few there.
epochs=10
. "$top_srcdir/tests/status-lib.sh"
check="$PY $top_srcdir/tests/status_check.py"
fails=0
status_start || { echo "FAIL: no status page line"; cat "$tmp/run.log"; exit 1; }
echo "status page: $url"
$check wait "$url" "$token" || fails=$((fails + 1))
$check api "$url" "$token" 64 2 || fails=$((fails + 1))
$check prom "$url" "$token" 64 2 || fails=$((fails + 1))
$check hostile "$url" "$token" || fails=$((fails + 1))
if status_finish; then echo "ok: the run ended well, replicas identical"
else echo "FAIL: the run failed"; tail -n 20 "$tmp/run.log"; fails=$((fails + 1)); fi
[ $fails -eq 0 ] || exit 1
