#!/bin/bash
# bench_compress.sh — what --compress fp16|bf16 buys on slow links: seedcnn
# trained by 4 workers, each on its own host (a network namespace, as
# bench_faults.sh and tests/test_netns.sh make them), every host's link
# limited to RATE (default 1 Gbit/s) both ways with tc tbf (netem is not in
# every kernel). For sync and average mode with none, fp16 and bf16 it
# prints the mean step time of the last epoch, the test accuracy after each
# epoch, the time to TARGET test accuracy (when reached) and the final one
# against uncompressed.
#
#   sudo bench/bench_compress.sh            (or as root)
#
# Environment: BUILD (default .: the build directory with src/ragtag), MODEL
# (seedcnn), EPOCHS (default 3), LIMIT (training images, default 0: all
# 60000), TARGET (default 0.91), RATE (default 1gbit), MODES (default "sync
# average"), KINDS (default "none fp16 bf16"), PORT (default 58600).
# Links are --insecure: the figure is the wire's, not CurveZMQ's CPU. The
# workers run 1 thread each; on a machine with fewer than 4 free cores their
# compute is shared too, which the step times include (say so with them).
# Never fails on speed: it prints figures. Skips (exit 77) without root.
set -u
BUILD=${BUILD:-.}
top=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${MODEL:-seedcnn}
EPOCHS=${EPOCHS:-3}
LIMIT=${LIMIT:-0}
TARGET=${TARGET:-0.91}
RATE=${RATE:-1gbit}
MODES=${MODES:-sync average}
KINDS=${KINDS:-none fp16 bf16}
PORT=${PORT:-58600}
ragtag=$BUILD/src/ragtag
[ -x "$ragtag" ] || { echo "no $ragtag: build it, or set BUILD to the build directory"; exit 1; }
ragtag=$(cd "$(dirname "$ragtag")" && pwd)/ragtag
. "$top/tests/netns-lib.sh"
why=$(rtf_ns_usable) || { echo "skipped: $why"; exit 77; }
command -v tc >/dev/null 2>&1 || { echo "skipped: no tc command (iproute2)"; exit 77; }
NS=rtz$$
tmp=$(mktemp -d /tmp/ragtag-compress.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rtf_ns_down "$NS" 4
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rtf_ns_up "$NS" 4 || { echo "cannot make the namespaces"; exit 1; }
# every host's link, both ways: the host's eth0 and the switch's port to it
for h in c 1 2 3 4; do
  ip netns exec "$NS-$h" tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 10ms &&
    ip netns exec "$NS-sw" tc qdisc add dev "p$h" root tbf rate "$RATE" burst 256kb latency 10ms ||
    { echo "cannot limit the links with tc tbf"; exit 1; }
done

# one run: mode kind -> its metrics file $tmp/MODE-KIND.jsonl
one() {
  local id=$1-$2 limit=()
  [ "$LIMIT" -gt 0 ] && limit=(--limit "$LIMIT")
  (rtf_ns_exec "$NS-c" hc "$ragtag" coord "$top/examples/$MODEL.cfg" --workers 4 \
    --listen "tcp://10.250.0.1:$PORT" --insecure --data fashion-mnist --val 0 "${limit[@]}" \
    --epochs "$EPOCHS" --batch 64 --progress off --mode "$1" --compress "$2" \
    --metrics "$tmp/$id.jsonl") >"$tmp/$id-c.log" 2>&1 &
  local c=$!
  pids+=($c)
  for k in 1 2 3 4; do
    (rtf_ns_exec "$NS-$k" "h$k" "$ragtag" worker --join "tcp://10.250.0.1:$PORT" --insecure \
      --advertise "10.250.0.$((10 + k))" --name "w$k" --threads 1 --connect-timeout 60) \
      >"$tmp/$id-w$k.log" 2>&1 &
    pids+=($!)
  done
  wait "$c" || { echo "$id: the run failed:"; tail -n 5 "$tmp/$id-c.log"; }
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
  PORT=$((PORT + 1))
}

# epoch lines -> "step_ms acc1 acc2 ... | time_to_target final_acc"
summary() {
  grep '^{"epoch"' "$1" | awk -v target="$TARGET" -v batch=64 '
    { ips = 0; acc = 0; secs = 0
      if (match($0, /"images_per_s": [0-9.e+-]+/)) ips = substr($0, RSTART + 16, RLENGTH - 16) + 0
      if (match($0, /"test_acc": [0-9.e+-]+/)) acc = substr($0, RSTART + 12, RLENGTH - 12) + 0
      if (match($0, /"seconds": [0-9.e+-]+/)) secs = substr($0, RSTART + 11, RLENGTH - 11) + 0
      total += secs; accs = accs sprintf(" %.2f", 100 * acc)
      if (reached == "" && acc >= target) reached = sprintf("%.0f s", total)
      last_ips = ips; final = acc }
    END { if (NR == 0) { print "no epochs"; exit }
          printf "step %6.1f ms | test acc by epoch%s | %.0f%% after %s | final %.2f%%\n",
                 1000 * batch / last_ips, accs, 100 * target, (reached == "" ? "not reached" : reached), 100 * final }'
}

echo "$MODEL, 4 workers x 1 thread, each host's link $RATE (tc tbf), $EPOCHS epochs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in $MODES; do
  for kind in $KINDS; do
    one "$mode" "$kind"
    printf "%-8s %-5s %s\n" "$mode" "$kind" "$(summary "$tmp/$mode-$kind.jsonl")"
  done
done
