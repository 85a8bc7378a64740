#!/bin/sh
# bench_status.sh [PAIRS] — what the status page costs training: lenet on 2
# local workers (1 thread each), one epoch, without --http and with --http
# plus one poller fetching /api/status every second (as the page does),
# interleaved PAIRS times (default 3) in one run of this script; prints the
# images/s of each epoch line. Figures in bench/README.md.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
RAGTAG=${RAGTAG:-$top/src/ragtag}
pairs=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=53990
run() { # with: 0 or 1
  extra=""
  [ "$1" = 1 ] && extra="--http 127.0.0.1:$port"
  OMP_NUM_THREADS=1 "$RAGTAG" train "$top/examples/lenet.cfg" --workers 2 --threads 1 \
    --epochs 1 --progress lines $extra >"$tmp/run.log" 2>&1 &
  pid=$!
  poller=""
  if [ "$1" = 1 ]; then
    sleep 1
    url=$(grep -o "status page on http://[^ ]*" "$tmp/run.log" | head -n 1 | sed 's/status page on //')
    tok=${url#*token=}
    ( while kill -0 $pid 2>/dev/null; do
        curl -s -o /dev/null -H "Authorization: Bearer $tok" "http://127.0.0.1:$port/api/status"
        sleep 1
      done ) &
    poller=$!
  fi
  wait $pid
  [ -n "$poller" ] && wait "$poller"
  sed -n 's/.*| \([0-9]*\) img\/s.*/\1/p' "$tmp/run.log" | tail -n 1
}
printf '%-6s %14s %22s\n' pair "without --http" "--http + 1 poller"
for i in $(seq "$pairs"); do
  a=$(run 0)
  b=$(run 1)
  printf '%-6s %14s %22s\n' "$i" "$a" "$b"
done
