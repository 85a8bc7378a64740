# elastic-lib.sh — what test_elastic.sh and test_elastic_modes.sh share:
# a run's temporary directory and processes, and its checks. Sourced after
# RAGTAG is set; the caller sets ntrain and pids and defines worker().
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0

ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
until_there() { # pattern log | -f path: wait (up to 60 s) for a line in a log, or a file
  i=0
  if [ "$1" = -f ]; then
    while [ $i -lt 600 ] && [ ! -f "$2" ]; do sleep 0.1; i=$((i + 1)); done
  else
    while [ $i -lt 600 ] && ! grep -q "$1" "$2"; do sleep 0.1; i=$((i + 1)); done
  fi
}
started() { until_there "^epoch 1/" "$1"; } # log: the first epoch line
wait_all() { for p in $pids; do wait "$p" 2>/dev/null; done; pids=""; }
# every epoch of a metrics file used each of the $ntrain samples once
samples_exact() { # metrics epochs
  n=$(grep -c "\"samples\": $ntrain[,}]" "$1")
  [ "$n" -eq "$2" ] && ! grep "\"samples\"" "$1" | grep -vq "\"samples\": $ntrain[,}]"
}
test_acc() { sed -n 's/.*test_acc \([0-9.]*\)%.*/\1/p' "$1" | tail -n 1; }
same_acc() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d <= 1 && d >= -1) }'; }
