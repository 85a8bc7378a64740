#!/bin/sh
# Uneven workers: lenet on Fashion-MNIST with 3 workers at speeds 1, 1 and
# 0.25, each `ragtag worker --threads 1` in its own CPU quota
# (bench/cpu-quota.sh), joined to a `ragtag coord` on 127.0.0.1. The quotas
# fit in the machine's cores so that the solo speeds add up: fast = min(1,
# cores x 0.9 / 2.25) cores, slow = fast / 4 (0.8, 0.8, 0.2 on 2 cores).
#
#   bench/bench_hetero.sh speed      solo images/s of each worker in its quota, their sum
#                                    (the ideal), and images/s of the 3 together in sync
#                                    mode with static and balanced shares, average mode
#                                    and gossip, as % of the ideal, in REPS rounds (each
#                                    round: the solos one at a time, the three solos side
#                                    by side, then the modes); the targets judged on the
#                                    median over the rounds of each round's ratio; each
#                                    mode also against the side-by-side sum (what this
#                                    machine gives three workers nothing couples)
#   bench/bench_hetero.sh accuracy   time to 89% test accuracy in each of those modes
#                                    (full data, up to EPOCHS epochs: long on 2 cores)
#   bench/bench_hetero.sh gossip     local steps/s of each worker in gossip mode, the three
#                                    at the fast quota next to w3 at the slow one, side by
#                                    side, and what the fast ones keep (target >= 80%: nobody
#                                    waits for the slow one; tests/test_dist.c asserts only
#                                    who did which steps)
#   bench/bench_hetero.sh            all three
#
# Environment: BUILD (default .: the build directory with src/ragtag), CORES
# (default: nproc), LIMIT (images per epoch of the speed runs, default
# 25600), SPEED_EPOCHS (default 3: images/s over epochs 2.., after the
# start-up and the first plan), REPS (speed rounds, default 3; gossip: runs
# per cell, best kept), EPOCHS (accuracy part, default 10), TARGET (default 0.89),
# MODES (default "static balanced average gossip"), PERIOD_US (CFS period
# of the quotas, default 100000; see bench/README.md), LOGS (a directory
# to keep the coordinators' logs and metrics in, LABEL.ROUND.log/.jsonl), HOW (auto, cgroup or
# throttle; default auto: cgroups where cpu-quota.sh can make them, else
# --throttle F, and the output says so), BATCH (global batch of the speed
# runs, default 64). Needs root for the cgroups. Never
# fails on speed: it prints figures.
set -eu
BUILD=${BUILD:-.}
top=$(cd "$(dirname "$0")/.." && pwd)
CORES=${CORES:-$(nproc)}
LIMIT=${LIMIT:-25600}
SPEED_EPOCHS=${SPEED_EPOCHS:-3}
REPS=${REPS:-3}
EPOCHS=${EPOCHS:-10}
TARGET=${TARGET:-0.89}
MODES=${MODES:-static balanced average gossip}
PERIOD_US=${PERIOD_US:-100000}
LOGS=${LOGS:-}
HOW=${HOW:-auto}
BATCH=${BATCH:-64}
what=${1:-all}
case $what in
  speed | accuracy | gossip | all) ;;
  *) echo "usage: $0 [speed|accuracy|gossip]"; exit 2 ;;
esac
ragtag=$BUILD/src/ragtag
[ -x "$ragtag" ] || { echo "no $ragtag: build it, or set BUILD to the build directory"; exit 1; }
quota_sh=$top/bench/cpu-quota.sh
model=$top/examples/lenet.cfg
[ -z "$LOGS" ] || mkdir -p "$LOGS"

tmp=$(mktemp -d)
pids=''
# TERM to every worker (through its cpu-quota.sh, which removes the cgroup)
# and coordinator still running; KILL after 10 s.
stop_all() {
  [ -n "$pids" ] || return 0
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  i=0
  while [ $i -lt 100 ]; do
    alive=''
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    [ -n "$alive" ] || break
    sleep 0.1
    i=$((i + 1))
  done
  for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  for p in $pids; do wait "$p" 2>/dev/null || true; done
  pids=''
}
trap 'stop_all; rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# the quotas, in cores
q_fast=$(awk -v c="$CORES" 'BEGIN { f = c * 0.9 / 2.25; if (f > 1) f = 1; printf "%.3g", f }')
q_slow=$(awk -v f="$q_fast" 'BEGIN { printf "%.3g", f / 4 }')
workers="w1:$q_fast w2:$q_fast w3:$q_slow" # ranked by name: w3 is the slow one

case $HOW in
  auto)
    how=cgroup
    rc=0
    "$quota_sh" --period "$PERIOD_US" "$q_slow" -- true 2>"$tmp/probe" || rc=$?
    if [ $rc = 77 ]; then
      how=throttle
      echo "NOTE: no CPU-quota cgroup here: $(cat "$tmp/probe")"
      echo "NOTE: falling back to ragtag worker --throttle F (sleeps after each step) for the speeds"
    elif [ $rc != 0 ]; then
      cat "$tmp/probe"
      exit 1
    fi ;;
  cgroup | throttle) how=$HOW ;;
  *) echo "HOW is auto, cgroup or throttle"; exit 2 ;;
esac

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  else
    awk -v s="$$" 'BEGIN { srand(s + systime()); print 20000 + int(rand() * 40000) }'
  fi
}

# start_worker NAME QUOTA PORT: one worker in its quota, in the background
start_worker() {
  if [ "$how" = cgroup ]; then
    "$quota_sh" --period "$PERIOD_US" "$2" -- "$ragtag" worker --join "tcp://127.0.0.1:$3" \
      --threads 1 --name "$1" --connect-timeout 60 --quiet >"$tmp/$1.log" 2>&1 &
  else
    "$ragtag" worker --join "tcp://127.0.0.1:$3" --threads 1 --name "$1" --connect-timeout 60 \
      --quiet --throttle "$2" >"$tmp/$1.log" 2>&1 &
  fi
  pids="$pids $!"
}

# run LABEL METRICS "NAME:QUOTA ..." COORD-FLAGS...: the coordinator and
# those workers, one run; the metrics (JSON lines) in METRICS. Returns the
# coordinator's status; on failure prints the tails of the logs.
run() {
  label=$1 mf=$2 ws=$3
  shift 3
  rm -f "$mf"
  port=$(free_port)
  n=0
  for w in $ws; do
    start_worker "${w%%:*}" "${w#*:}" "$port"
    n=$((n + 1))
  done
  "$ragtag" coord "$model" --workers $n --listen "tcp://127.0.0.1:$port" --join-timeout 60 \
    --data fashion-mnist --val 0 --progress lines --metrics "$mf" "$@" >"$tmp/coord.log" 2>&1 &
  cpid=$!
  pids="$pids $cpid"
  crc=0
  wait $cpid || crc=$?
  # the workers end with the run; give them 20 s, then stop them
  i=0
  while [ $i -lt 200 ]; do
    alive=''
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    [ -n "$alive" ] || break
    sleep 0.1
    i=$((i + 1))
  done
  stop_all
  if [ -n "$LOGS" ]; then
    f=$(echo "$label" | tr -c 'A-Za-z0-9_\n-' _)
    n=1 # one pair of files per round
    while [ -e "$LOGS/$f.$n.log" ]; do n=$((n + 1)); done
    f="$f.$n"
    cp "$tmp/coord.log" "$LOGS/$f.log"
    [ ! -f "$mf" ] || cp "$mf" "$LOGS/$f.jsonl"
  fi
  if [ $crc != 0 ]; then
    echo "  $label: the coordinator failed (status $crc):"
    tail -n 5 "$tmp/coord.log" | sed 's/^/    /'
    for w in $ws; do tail -n 3 "$tmp/${w%%:*}.log" | sed 's/^/    /'; done
  fi
  return $crc
}

# run_side "NAME:QUOTA ..." COORD-FLAGS...: each worker alone with a
# coordinator of its own, all at once: what the machine gives the workers
# when nothing couples them. On one machine the solos one at a time each
# have the other cores' caches, memory bandwidth and hypervisor time to
# themselves; side by side they do not, and neither do the modes. Each
# worker's metrics in $tmp/side_NAME.jsonl; returns non-zero if any failed.
run_side() {
  ws=$1
  shift
  cpids=''
  for w in $ws; do
    nm=${w%%:*}
    rm -f "$tmp/side_$nm.jsonl"
    port=$(free_port)
    start_worker "$nm" "${w#*:}" "$port"
    "$ragtag" coord "$model" --workers 1 --listen "tcp://127.0.0.1:$port" --join-timeout 60 \
      --data fashion-mnist --val 0 --progress lines --metrics "$tmp/side_$nm.jsonl" "$@" \
      >"$tmp/side_$nm.log" 2>&1 &
    cpids="$cpids $!"
    pids="$pids $!"
  done
  src=0
  for c in $cpids; do wait "$c" || src=$?; done
  stop_all
  if [ $src != 0 ]; then
    echo "  side by side: a coordinator failed (status $src):"
    for w in $ws; do tail -n 3 "$tmp/side_${w%%:*}.log" | sed 's/^/    /'; done
  fi
  return $src
}

# jf(NAME): that field of a metrics line (JSON, one object a line), for awk
# shellcheck disable=SC2016 # awk code, not shell
JF='function jf(k,  i) { i = index($0, "\"" k "\": "); if (!i) return ""
  return substr($0, i + length(k) + 4) + 0 }'
# field NAME FILE: that field of every epoch line
field() { awk -v k="$1" "$JF"' { print jf(k) }' "$2"; }
# images/s over the epochs from the 2nd on (all samples / all training time);
# epoch lines only (the metrics file also holds plan and memory events)
ips_after_first() {
  awk "$JF"' /^\{"epoch"/ && ++k > 1 && jf("images_per_s") > 0 { n += jf("samples"); t += jf("samples") / jf("images_per_s") }
    END { if (t > 0) printf "%.0f", n / t; else print 0 }' "$1"
}
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

mode_flags() {
  case $1 in
    static) echo "--mode sync --partition static" ;;
    balanced) echo "--mode sync --partition balanced" ;;
    average) echo "--mode average --sync-every 8 --partition balanced" ;;
    gossip) echo "--mode gossip" ;;
    *) echo "unknown mode $1 (static balanced average gossip)" >&2; return 1 ;;
  esac
}
mode_name() {
  case $1 in
    static) echo "sync, static shares" ;;
    balanced) echo "sync, balanced shares" ;;
    average) echo "average, --sync-every 8" ;;
    gossip) echo "gossip" ;;
  esac
}

how_line() {
  if [ "$how" = cgroup ]; then
    echo "workers in CPU-quota cgroups (CFS period $PERIOD_US us): w1 $q_fast, w2 $q_fast, w3 $q_slow cores"
  else
    echo "workers throttled by sleeping (--throttle, not cgroups): w1 $q_fast, w2 $q_fast, w3 $q_slow"
  fi
}

# epoch_ips FILE EVAL: img/s over the epochs from the 2nd on, by epoch time
# less EVAL seconds of test evaluation an epoch
epoch_ips() {
  awk -v e="$2" "$JF"' /^\{"epoch"/ && ++k > 1 { n += jf("samples"); t += jf("seconds") - e }
    END { if (t > 0) printf "%.0f", n / t; else print 0 }' "$1"
}

# Rounds: each runs the three solos, then every mode, so that each mode is
# also compared with the solo sum of its own round (the machine's speed
# drifts between rounds; the sum of each worker's best solo over all
# rounds is an optimistic ideal). The table keeps the best of the rounds;
# the targets are judged on the median over the rounds of each round's
# ratio.
speed() {
  echo "==== speed: lenet, Fashion-MNIST, $SPEED_EPOCHS epochs of $LIMIT images, batch $BATCH, --val 0;" \
       "img/s over epochs 2..$SPEED_EPOCHS, $REPS rounds ===="
  echo "$(how_line); $CORES cores"
  common="--limit $LIMIT --epochs $SPEED_EPOCHS --batch $BATCH"
  : >"$tmp/evals"
  : >"$tmp/runs" # ROUND KIND NAME IMG/S (KIND: solo or mode)
  for r in $(seq "$REPS"); do
    for w in $workers; do
      # shellcheck disable=SC2086 # flags, one a word
      run "solo ${w%%:*}" "$tmp/m.jsonl" "$w" $common || continue
      echo "$r solo ${w%%:*} $(ips_after_first "$tmp/m.jsonl")" >>"$tmp/runs"
    done
    # shellcheck disable=SC2086
    if run_side "$workers" $common; then
      for w in $workers; do
        echo "$r side ${w%%:*} $(ips_after_first "$tmp/side_${w%%:*}.jsonl")" >>"$tmp/runs"
      done
    fi
    for m in $MODES; do
      flags=$(mode_flags "$m")
      # shellcheck disable=SC2086
      run "$m" "$tmp/m.jsonl" "$workers" $common $flags || continue
      v=$(ips_after_first "$tmp/m.jsonl")
      echo "$r mode $m $v" >>"$tmp/runs"
      cp "$tmp/m.jsonl" "$tmp/r${r}_$m.jsonl"
      # the test evaluation's seconds per epoch: epoch seconds less the
      # training loop (not in gossip, whose img/s is rank 0's loop only)
      [ "$m" = gossip ] || awk "$JF"' /^\{"epoch"/ && ++k > 1 && jf("images_per_s") > 0 {
        print jf("seconds") - jf("samples") / jf("images_per_s") }' "$tmp/m.jsonl" >>"$tmp/evals"
      note=$(grep '\[plan\]' "$tmp/coord.log" | tail -n 1 | sed 's/.*by rank: //')
      [ "$m" = static ] && note=''
      [ "$m" = gossip ] || [ -z "$note" ] ||
        note="$note, $(grep -c '\[plan\]' "$tmp/coord.log" || true) plans"
      echo "$note" >"$tmp/r${r}_$m.note"
    done
  done
  # median test-evaluation seconds per epoch (0 when only gossip ran)
  ev=$(sort -g "$tmp/evals" | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }')
  ideal=0 fast=0
  for w in $workers; do
    best=$(awk -v n="${w%%:*}" '$2 == "solo" && $3 == n && $4 > b { b = $4 } END { print b + 0 }' "$tmp/runs")
    [ "$fast" != 0 ] || fast=$best
    awk -v n="${w%%:*}" -v q="${w#*:}" -v v="$best" -v f="$fast" 'BEGIN {
      printf "solo %-3s at %-5s            %8.0f img/s  (%.2f of w1; best of the rounds)\n", n, q, v,
             (f > 0 ? v / f : 0) }'
    ideal=$(awk -v a="$ideal" -v b="$best" 'BEGIN { print a + b }')
  done
  printf "ideal: sum of the solo speeds %8.0f img/s\n" "$ideal"
  awk '$2 == "side" { s[$1] += $4 } END { for (r in s) if (s[r] > b) b = s[r]
    if (b > 0) printf "side by side (the three solos at once, uncoupled): sum %8.0f img/s (best round)\n", b }' "$tmp/runs"
  echo
  printf "%-26s %8s %8s %11s %8s  %-31s %s\n" "3 workers together" "img/s" "% ideal" "epoch img/s" \
    "% ideal" "target" "shares (last plan; gossip: local batches)"
  : >"$tmp/ratios" # MODE ROUND % (img/s, or epoch img/s for gossip) of the round's solo sum
  : >"$tmp/side_ratios" # the same, of the round's side-by-side sum
  static=0 balanced=0
  for m in $MODES; do
    best=0 epoch=0 note=''
    for r in $(seq "$REPS"); do
      [ -f "$tmp/r${r}_$m.jsonl" ] || continue
      v=$(awk -v r="$r" -v m="$m" '$1 == r && $2 == "mode" && $3 == m { print $4 }' "$tmp/runs")
      e=$(epoch_ips "$tmp/r${r}_$m.jsonl" "$ev")
      sum=$(awk -v r="$r" '$1 == r && $2 == "solo" { s += $4 } END { print s + 0 }' "$tmp/runs")
      x=$v
      [ "$m" != gossip ] || x=$e
      awk -v m="$m" -v r="$r" -v x="$x" -v s="$sum" 'BEGIN { if (s > 0) printf "%s %d %.1f\n", m, r, 100 * x / s }' >>"$tmp/ratios"
      side=$(awk -v r="$r" '$1 == r && $2 == "side" { s += $4; n++ } END { print (n == 3) ? s : 0 }' "$tmp/runs")
      awk -v m="$m" -v r="$r" -v x="$x" -v s="$side" 'BEGIN { if (s > 0) printf "%s %d %.1f\n", m, r, 100 * x / s }' >>"$tmp/side_ratios"
      [ "$(max "$best" "$v")" = "$v" ] || continue
      best=$v epoch=$e note=$(cat "$tmp/r${r}_$m.note")
    done
    target=''
    case $m in
      static) static=$best ;;
      balanced) balanced=$best target=">= 85% of ideal, >= 2x static" ;;
      gossip) target=">= 90% of ideal (epoch img/s)" ;;
    esac
    awk -v n="$(mode_name "$m")" -v v="$best" -v i="$ideal" -v w="$epoch" -v t="$target" -v x="$note" 'BEGIN {
      printf "%-26s %8.0f %7.1f%% %11.0f %7.1f%%  %-31s %s\n", n, v, (i > 0 ? 100 * v / i : 0), w,
             (i > 0 ? 100 * w / i : 0), t, x }'
  done
  echo
  # median over the rounds of each round's ratio (FILE: ratios or side_ratios)
  median_ratio() {
    awk -v m="$1" '$1 == m { v[++n] = $3 } END {
      if (!n) { print 0; exit }
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }' "$tmp/${2:-ratios}"
  }
  rounds() { awk -v m="$1" '$1 == m { printf "%s%s%%", (n++ ? " " : ""), $3 }' "$tmp/${2:-ratios}"; }
  if grep -q '^balanced ' "$tmp/ratios"; then
    awk -v b="$(median_ratio balanced)" -v rs="$(rounds balanced)" -v bb="$balanced" -v s="$static" 'BEGIN {
      printf "balanced: %.1f%% of its round'"'"'s solo sum, median of the rounds (%s; target >= 85%%: %s)",
             b, rs, (b >= 85 ? "met" : "NOT met")
      if (s > 0) printf "; best %.2fx static (target >= 2x: %s)", bb / s, (bb >= 2 * s ? "met" : "NOT met")
      printf "\n" }'
  fi
  if grep -q '^gossip ' "$tmp/ratios"; then
    awk -v g="$(median_ratio gossip)" -v rs="$(rounds gossip)" 'BEGIN {
      printf "gossip: %.1f%% of its round'"'"'s solo sum by epoch time, median of the rounds (%s; target >= 90%%: %s)\n",
             g, rs, (g >= 90 ? "met" : "NOT met") }'
  fi
  for m in $MODES; do
    grep -q "^$m " "$tmp/side_ratios" || continue
    awk -v n="$m" -v g="$(median_ratio "$m" side_ratios)" -v rs="$(rounds "$m" side_ratios)" 'BEGIN {
      printf "%s: %.1f%% of its round'"'"'s side-by-side sum, median of the rounds (%s)\n", n, g, rs }'
  done
  if [ -s "$tmp/evals" ]; then
    ev_note="the test evaluation's $(printf %.2f "$ev") s, measured in the other modes"
  else
    ev_note="nothing: no other mode ran to measure the test evaluation, which is included"
  fi
  echo "img/s: ragtag's images_per_s, samples / training-loop seconds (gossip: rank 0's own loop, which" \
       "ends before slower workers finish theirs); epoch img/s: samples / (epoch seconds - $ev_note)"
  return 0
}

accuracy() {
  echo "==== time to $TARGET test accuracy: lenet ([train] recipe: AdamW, cosine over $EPOCHS epochs)," \
       "full Fashion-MNIST, --val 0, up to $EPOCHS epochs ===="
  how_line
  echo "seconds: the sum of the epochs' seconds (training + test evaluation), after the start-up"
  for m in $MODES; do
    flags=$(mode_flags "$m")
    t0=$(date +%s)
    # shellcheck disable=SC2086
    run "accuracy $m" "$tmp/a.jsonl" "$workers" --epochs "$EPOCHS" $flags || continue
    wall=$(($(date +%s) - t0))
    awk -v n="$(mode_name "$m")" -v t="$TARGET" -v e="$EPOCHS" -v w="$wall" "$JF"'
      { a = jf("test_acc"); s += jf("seconds"); last = a; if (a > best) best = a
        if (!hit && a >= t) { hit = NR; at = s; acc = a } }
      END {
        if (hit) printf "%-26s %5.1f%% at epoch %d after %6.1f s", n, 100 * acc, hit, at
        else printf "%-26s not reached in %d epochs (best %.2f%%)", n, e, 100 * best
        printf " | final %.2f%%, best %.2f%%, %d epochs %.1f s, run %d s wall\n", 100 * last, 100 * best, NR, s, w
      }' "$tmp/a.jsonl"
  done
}

# rank_steps LOG: "RANK STEPS SECONDS" for each worker's "N local steps in S s" line
rank_steps() {
  sed -n 's/.*(rank \([0-9]*\)): \([0-9]*\) local steps in \([0-9.]*\) s of training.*/\1 \2 \3/p' "$1"
}

gossip_rates() {
  echo "==== gossip: local steps/s of each worker, 3 workers at $q_fast next to w3 at $q_slow;" \
       "1 epoch of $LIMIT images, batch $BATCH, best of $REPS ===="
  how_line
  : >"$tmp/grates"
  # (run() sets label, ws, n and w: this loop's names differ)
  for cell in even slowed; do
    them="w1:$q_fast w2:$q_fast w3:$q_fast"
    [ $cell = even ] || them=$workers
    for _ in $(seq "$REPS"); do
      run "gossip $cell" "$tmp/g.jsonl" "$them" --limit "$LIMIT" --epochs 1 --batch "$BATCH" \
        --mode gossip || continue
      rank_steps "$tmp/coord.log" | sed "s/^/$cell /" >>"$tmp/grates"
    done
  done
  awk '$4 > 0 { v = $3 / $4; k = $1 " " $2; if (v > best[k]) best[k] = v }
    END {
      printf "%-5s %14s %20s %8s  %s\n", "rank", "even steps/s", "w3 slowed steps/s", "kept", "target"
      for (r = 0; r < 3; r++) {
        e = best["even " r] + 0; s = best["slowed " r] + 0
        t = r == 2 ? "(w3: the slow one)" : (e > 0 && s >= 0.8 * e ? ">= 80%: met" : ">= 80%: NOT met")
        printf "%-5d %14.1f %20.1f %7.0f%%  %s\n", r, e, s, (e > 0 ? 100 * s / e : 0), t
      }
    }' "$tmp/grates"
  echo "steps/s: a worker's local steps / its seconds in the training loop (the coordinator's" \
       "report); on a full machine the fast ones may gain when w3 sleeps"
}

case $what in
  speed) speed ;;
  accuracy) accuracy ;;
  gossip) gossip_rates ;;
  all) speed && echo && accuracy && echo && gossip_rates ;;
esac
