#!/bin/sh
# The status page in a browser (docs/status.md): headless Chromium loads it
# during a real 2-worker run with the URL the coordinator printed; the DOM
# has one row per worker and the charts' canvases are painted (the page
# counts each canvas's drawn pixels into data-painted). A screenshot is
# kept as tests/test_status_page.png (the page mid-run: run fields, the
# worker table, the loss/accuracy/images-per-second/share charts, events).
set -u
RAGTAG=${RAGTAG:-$top_builddir/src/ragtag}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"; exit 77
fi
CHROMIUM=""
for c in chromium chromium-browser; do
  if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$c; break; fi
done
if [ -z "$CHROMIUM" ]; then echo "SKIP: no chromium (apt-get install chromium)"; exit 77; fi
if "$RAGTAG" train x.cfg --workers 2 --http 1 2>&1 | grep -q "built without the status page"; then
  echo "SKIP: ragtag built without libmicrohttpd (apt-get install libmicrohttpd-dev)"; exit 77
fi
if ! grep -q "page charts ...... yes" "$top_builddir/config.log" 2>/dev/null &&
   ! grep -q 'CHARTJS=.*chart' "$top_builddir/config.log" 2>/dev/null; then
  echo "SKIP: ragtag built without Chart.js (apt-get install libjs-chart.js)"; exit 77
fi
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
# Ports: 28000-28999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((28000 + ($$ % 97) * 10))
# 8 epochs: two Chromium loads after epoch 1 must see the run still going
# where 2 lenet workers train 35,000 img/s (1.5 s an epoch).
epochs=8
. "$top_srcdir/tests/status-lib.sh"
fails=0
status_start || { echo "FAIL: no status page line"; cat "$tmp/run.log"; exit 1; }
for _ in $(seq 200); do # a finished epoch: the epoch charts have points
  grep -q "^epoch 1/" "$tmp/run.log" && break
  sleep 0.2
done
browse() { # what Chromium does with the page, headless, no sandbox (root in CI)
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --user-data-dir="$tmp/chrome" --window-size=1300,1500 \
    --virtual-time-budget=6000 "$@" "$url/?token=$token" 2>>"$tmp/chrome.log"
}
browse --dump-dom >"$tmp/dom.html"
rows=$(grep -o '<tr class="worker [a-z]*"' "$tmp/dom.html" | wc -l)
painted=$(grep -o 'data-painted="[0-9]*"' "$tmp/dom.html" | grep -vc '"0"')
if [ "$rows" -eq 2 ] && grep -q 'local-0' "$tmp/dom.html" && grep -q 'local-1' "$tmp/dom.html"; then
  echo "ok: the page has one row per worker ($rows)"
else echo "FAIL: $rows worker rows"; fails=$((fails + 1)); fi
if [ "$painted" -ge 4 ]; then
  echo "ok: $painted chart canvases painted: $(grep -o 'id="c_[a-z]*"[^>]*data-painted="[0-9]*"' "$tmp/dom.html" | sed 's/ height="[0-9]*"//' | tr '\n' ' ')"
else echo "FAIL: $painted canvases painted"; grep -o '<canvas[^>]*>' "$tmp/dom.html"; fails=$((fails + 1)); fi
browse --screenshot="$tmp/page.png" >/dev/null
if [ -s "$tmp/page.png" ]; then
  cp "$tmp/page.png" "$top_builddir/tests/test_status_page.png"
  echo "ok: screenshot in tests/test_status_page.png ($(wc -c <"$tmp/page.png") bytes)"
else echo "FAIL: no screenshot"; tail -n 5 "$tmp/chrome.log"; fails=$((fails + 1)); fi
if status_finish; then echo "ok: the run ended well, replicas identical"
else echo "FAIL: the run failed"; tail -n 20 "$tmp/run.log"; fails=$((fails + 1)); fi
[ $fails -eq 0 ] || exit 1
