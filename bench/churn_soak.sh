#!/bin/bash
# Churn soak (issue 11): runs of lenet under a coordinator with a fixed
# port, --checkpoint and --max-workers 4, joined by 2 workers; ROUNDS
# times, 0.5-2.5 s apart at random, one worker, or one time in three every
# worker, is killed (-9), and one or two new workers join; with COORD=1,
# half the rounds kill the coordinator instead and start it again with
# --resume within 0-2 s (the workers wait for it, --coord-timeout 30). One row a run:
# the coordinator's status, epochs, whether every epoch used each sample
# once, restarts from the checkpoint (or the beginning), losses, joins,
# coordinators killed (COORD=1) and
# seconds; then how many runs failed (exit 1 if any). A run fails when it
# does not end with status 0, EPOCHS epochs and exact samples, or takes
# more than HARD seconds (then every process of it is killed: HUNG).
# It found the four faults of the fifteenth pass (bench/README.md).
#
#   bench/churn_soak.sh
#
# Environment: BUILD (the build directory, default .), MODES (default
# "sync average gossip"), RUNS (runs a mode, default 5), ROUNDS (default 5),
# COORD (1: kill the coordinator too, default 0),
# EPOCHS (default 8), HARD (default 300), PORT (the first of RUNS x MODES
# ports, default 34100), SEED (bash's RANDOM, default the time), LOGS (a
# directory to keep each run's logs in).
set -u
BUILD=${BUILD:-.}
top=$(cd "$(dirname "$0")/.." && pwd)
ragtag=$BUILD/src/ragtag
MODES=${MODES:-sync average gossip}
RUNS=${RUNS:-5} ROUNDS=${ROUNDS:-5} EPOCHS=${EPOCHS:-8} HARD=${HARD:-300}
port=${PORT:-34100}
RANDOM=${SEED:-$(date +%s)}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "churn_soak: needs Fashion-MNIST (apt-get install dataset-fashion-mnist)"
  exit 2
fi
tmp=$(mktemp -d)
trap 'kill -9 $(cat "$tmp"/*/pids 2>/dev/null) 2>/dev/null; rm -rf "$tmp"' EXIT
ntrain=6000

worker() { # dir (in a subshell: no "Killed" line from bash for each kill)
  n=$(($(wc -l <"$1/pids") + 1))
  ("$ragtag" worker --join "tcp://127.0.0.1:$port" --name "s$n" --threads 1 --connect-timeout 120 \
    --coord-timeout 30 >"$1/s$n.log" 2>&1 & echo $! >>"$1/pids")
}

alive() { for p in $(cat "$1/pids"); do kill -0 "$p" 2>/dev/null && echo "$p"; done; }

coordinator() { # mode dir [--resume]: in the background, $c its pid
  "$ragtag" coord "$top/examples/lenet.cfg" --workers 2 --max-workers 4 \
    --listen "tcp://127.0.0.1:$port" --data fashion-mnist --limit $ntrain --val 0 --batch 48 \
    --epochs "$EPOCHS" --mode "$1" --checkpoint "$2/ck" --metrics "$2/m.jsonl" \
    --progress lines ${3:-} >>"$2/coord.log" 2>&1 &
  c=$!
}

one_run() { # mode dir: prints the row; returns 1 when the run failed
  mode=$1 d=$2
  mkdir -p "$d"
  coordinator "$mode" "$d"
  : >"$d/pids"
  t0=$SECONDS coords=0
  worker "$d"; worker "$d"
  for _ in $(seq "$ROUNDS"); do
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + 2 * r / 32768 }')"
    kill -0 $c 2>/dev/null || break
    if [ "${COORD:-0}" = 1 ] && [ $((RANDOM % 2)) = 0 ]; then
      kill -9 $c
      wait $c 2>/dev/null
      sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 2 * r / 32768 }')"
      coordinator "$mode" "$d" --resume
      coords=$((coords + 1))
      continue
    fi
    if [ $((RANDOM % 3)) = 0 ]; then
      kill -9 $(alive "$d") 2>/dev/null
    else
      kill -9 $(alive "$d" | shuf -n 1) 2>/dev/null
    fi
    worker "$d"
    [ $((RANDOM % 2)) = 0 ] && worker "$d"
  done
  while kill -0 $c 2>/dev/null && [ $((SECONDS - t0)) -lt "$HARD" ]; do sleep 0.5; done
  status=HUNG
  if kill -0 $c 2>/dev/null; then kill -9 $c; wait $c 2>/dev/null; else wait $c; status=$?; fi
  sleep 1
  kill -9 $(alive "$d") 2>/dev/null
  # each epoch's last line (a restarted coordinator may write an epoch again)
  epochs=0 wrong=0
  for e in $(seq "$EPOCHS"); do
    line=$(grep "^{\"epoch\": $e," "$d/m.jsonl" 2>/dev/null | tail -n 1)
    [ -n "$line" ] && epochs=$((epochs + 1))
    [ -n "$line" ] && ! echo "$line" | grep -q "\"samples\": $ntrain[,}]" && wrong=$((wrong + 1))
  done
  restarts=$(grep -c "instead the run \(goes on\|starts again\)" "$d/coord.log")
  lost=$(grep -c "\[members\] generation [0-9]*: lost" "$d/coord.log")
  joined=$(grep -c "\[members\] generation [0-9]*: admitted" "$d/coord.log")
  printf "%-7s %6s %6s %9s %8s %5s %6s %6s %6s\n" "$mode" "$status" "$epochs/$EPOCHS" \
    "$([ "$wrong" = 0 ] && echo exact || echo "$wrong bad")" "$restarts" "$lost" "$joined" \
    "$coords" "$((SECONDS - t0))"
  [ "$status" = 0 ] && [ "$epochs" = "$EPOCHS" ] && [ "$wrong" = 0 ] ||
    { echo "        last line: $(tail -n 1 "$d/coord.log" | cut -c1-240)"; return 1; }
}

printf "%-7s %6s %6s %9s %8s %5s %6s %6s %6s\n" mode status epochs samples restarts lost joined coords \
  secs
failed=0 total=0
for mode in $MODES; do
  for r in $(seq "$RUNS"); do
    d=$tmp/$mode.$r
    one_run "$mode" "$d" || failed=$((failed + 1))
    total=$((total + 1))
    [ -n "${LOGS:-}" ] && mkdir -p "$LOGS" && cp -r "$d" "$LOGS/"
    port=$((port + 1))
  done
done
echo "$failed of $total runs failed"
[ "$failed" = 0 ]
