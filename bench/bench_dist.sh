#!/bin/sh
# Distributed figures of ragtag next to its peers, same machine, same run
# (../shared/bench/README.md has what these machines showed before).
#
#   bench/bench_dist.sh allreduce   ring allreduce busbw and latency, 2 and 4 processes:
#                                   ragtag over shared memory (the ring between local
#                                   workers), in place (the gradient's sum when every
#                                   worker shares the host), over raw TCP links and
#                                   over ZeroMQ/TCP (as between hosts),
#                                   OpenMPI over shared memory and over TCP, PyTorch's
#                                   Gloo, and a plain TCP stream (bench/tcp_stream)
#   bench/bench_dist.sh join        how long 2 and 4 local workers take to join the
#                                   coordinator (the median of REPS runs)
#   bench/bench_dist.sh security    the same over TCP with CurveZMQ and --insecure (and
#                                   training with --link-security token)
#   bench/bench_dist.sh train       images/s of lenet and seedcnn: 2 local workers x 1
#                                   thread (gradient reduced during backward, and after
#                                   it: --overlap=off; both sum in place now that the
#                                   workers share the host, and with one shared copy of
#                                   the weights sum and update in one pass after
#                                   backward) against 1 process x 2 threads:
#                                   the ratio of the medians and the median of the rounds'
#                                   own ratios, for each epoch (TRAIN_EPOCHS, default 2:
#                                   the first with the warm-up, the last steady), the
#                                   2 workers with a copy of the weights each
#                                   (--host-replica=off), and 2 uncoupled 1-thread
#                                   processes side by side (what two separate replicas
#                                   reach with nothing between them); and the rounds'
#                                   own ratios apart by where the VM had put the two
#                                   vCPUs during both runs (bench/core_handoff: near,
#                                   one core complex sharing an L3, or far)
#
# Environment: BUILD (default .: the build directory with src/ragtag,
# bench/bench_allreduce and bench/tcp_stream, `make bench` builds them), SHARED (default
# ../shared), SIZES_MAX (default 67108864), REPS (training runs per cell,
# the median kept; default 5; security keeps the best), MODELS (train:
# default "lenet seedcnn"), NEAR_NS (train: a handoff under this many ns is
# the near placement; default 90). Needs openmpi-bin libopenmpi-dev and python3-torch for the
# peers (skipped when absent). Never fails on speed: it prints figures.
set -eu
BUILD=${BUILD:-.}
top=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SHARED:-$top/../shared}
SIZES_MAX=${SIZES_MAX:-67108864}
REPS=${REPS:-5}
mode=${1:-allreduce}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# busbw at >= 4 MiB (min .. max) and the 4 KiB time from a table with
# columns bytes ... busbw_GBs (the last numeric column before "check").
summary() { # file busbw-column time-column
  awk -v bc="$2" -v tc="$3" '
    /^ *[0-9]/ { if ($1 >= 4194304) { b = $bc + 0; if (n == 0 || b < lo) lo = b; if (b > hi) hi = b; n++ }
                 if ($1 == 4096) t = $tc }
    END { if (n) printf "busbw >=4MiB %.2f-%.2f GB/s, 4KiB %s us", lo, hi, t; else printf "n/a" }' "$1"
}

allreduce() {
  ar="$BUILD/bench/bench_allreduce"
  [ -x "$ar" ] && [ -x "$BUILD/bench/tcp_stream" ] || { echo "build it first: make bench (in $BUILD)"; exit 1; }
  have_mpi=no
  if command -v mpicc >/dev/null 2>&1 && [ -f "$SHARED/bench/mpi_allreduce.c" ]; then
    mpicc -O2 -o "$tmp/mpi_allreduce" "$SHARED/bench/mpi_allreduce.c" && have_mpi=yes
  fi
  have_gloo=no
  if [ -f "$SHARED/bench/gloo_allreduce.py" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    have_gloo=yes
  fi
  # malloc keeps freed memory for the peers (page faults are expensive here)
  tun="GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
  for n in 2 4; do
    echo "==== $n processes ===="
    "$ar" -n $n --max "$SIZES_MAX" --links shm | tee "$tmp/r_shm_$n"
    "$ar" -n $n --max "$SIZES_MAX" --links shm --actor > "$tmp/r_act_$n"
    "$ar" -n $n --max "$SIZES_MAX" --links host | tee "$tmp/r_host_$n"
    "$BUILD/bench/tcp_stream" | tee -a "$tmp/stream"
    "$ar" -n $n --max "$SIZES_MAX" --links tcp | tee "$tmp/r_tcp_$n"
    "$ar" -n $n --max "$SIZES_MAX" --links tcp --zmq | tee "$tmp/r_zmq_$n"
    if [ $have_mpi = yes ]; then
      env $tun mpirun --allow-run-as-root --oversubscribe -np $n "$tmp/mpi_allreduce" 4096 "$SIZES_MAX" \
        | tee "$tmp/m_sm_$n"
      env $tun mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np $n "$tmp/mpi_allreduce" \
        4096 "$SIZES_MAX" | tee "$tmp/m_tcp_$n"
    fi
    if [ $have_gloo = yes ]; then
      env $tun /usr/bin/python3 "$SHARED/bench/gloo_allreduce.py" --world $n --max-bytes "$SIZES_MAX" \
        | tee "$tmp/g_$n"
    fi
  done
  echo
  echo "==== summary (busbw = S/t * 2(n-1)/n; 4 KiB: mean time per op, ragtag also p50) ===="
  for n in 2 4; do
    printf "%d procs  ragtag shm (ring direct)        %s, p50 %s us\n" $n "$(summary "$tmp/r_shm_$n" 6 3)" \
      "$(awk '$1 == 4096 { print $4 }' "$tmp/r_shm_$n")"
    printf "%d procs  ragtag shm (via comm thread)    %s, p50 %s us\n" $n "$(summary "$tmp/r_act_$n" 6 3)" \
      "$(awk '$1 == 4096 { print $4 }' "$tmp/r_act_$n")"
    printf "%d procs  ragtag in place (one host)      %s, p50 %s us\n" $n "$(summary "$tmp/r_host_$n" 6 3)" \
      "$(awk '$1 == 4096 { print $4 }' "$tmp/r_host_$n")"
    printf "%d procs  ragtag raw TCP 127.0.0.x        %s, p50 %s us\n" $n "$(summary "$tmp/r_tcp_$n" 6 3)" \
      "$(awk '$1 == 4096 { print $4 }' "$tmp/r_tcp_$n")"
    printf "%d procs  ragtag ZeroMQ/TCP 127.0.0.x     %s, p50 %s us\n" $n "$(summary "$tmp/r_zmq_$n" 6 3)" \
      "$(awk '$1 == 4096 { print $4 }' "$tmp/r_zmq_$n")"
    [ $have_mpi = yes ] && printf "%d procs  OpenMPI shared memory           %s\n" $n "$(summary "$tmp/m_sm_$n" 6 4)"
    [ $have_mpi = yes ] && printf "%d procs  OpenMPI TCP                     %s\n" $n "$(summary "$tmp/m_tcp_$n" 6 4)"
    [ $have_gloo = yes ] && printf "%d procs  PyTorch Gloo                    %s\n" $n "$(summary "$tmp/g_$n" 6 4)"
  done
  # the ceiling of the raw links: a 2-process ring's busbw is what each
  # direction moves while both run ("both ways")
  sed 's/^raw TCP stream/         plain TCP stream/' "$tmp/stream"
  return 0
}

ips() { grep '^{"epoch"' "$1" | sed -n 's/.*"images_per_s": \([0-9.e+]*\).*/\1/p' | tail -n 1; }
# images/s of epoch E of a metrics file (0 when it has none)
ips_epoch() { grep "^{\"epoch\": $2," "$1" | sed -n 's/.*"images_per_s": \([0-9.e+]*\).*/\1/p' | tail -n 1 | grep . || echo 0; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# The one-way time of a cache line between the first two CPUs (bench/core_handoff).
handoff() {
  if [ -x "$BUILD/bench/core_handoff" ]; then
    "$BUILD/bench/core_handoff" | sed -n 's/.*: \([0-9]*\) ns.*/\1/p'
  else echo "n/a"; fi
}

# Two 1-thread processes side by side, each on half the images with half
# the batch (a worker's share), nothing between them: the sum of their
# images/s per epoch, into $tmp/pairE. What two replicas reach when no
# step waits for the other: on two vCPUs that share a cache, less than
# one process whose threads share one replica. (Each takes an optimiser
# step every 32 images, twice as often as a worker: seedcnn's SGD over its
# million parameters is ~8% of such a process's time, so the workers'
# true ceiling is a few points above this one.)
pair() { # model images epochs
  for w in a b; do
    rm -f "$tmp/pair-$w.jsonl"
    "$BUILD/src/ragtag" train "$top/examples/$1.cfg" --data fashion-mnist --val 0 \
      --limit $(($2 / 2)) --epochs "$3" --batch 32 --lr 0.01 --momentum 0.9 --progress off \
      --threads 1 --metrics "$tmp/pair-$w.jsonl" >/dev/null 2>&1 &
  done
  wait
  for e in $(seq "$3"); do
    echo "$(ips_epoch "$tmp/pair-a.jsonl" "$e") $(ips_epoch "$tmp/pair-b.jsonl" "$e")" |
      awk '{ print ($1 > 0 && $2 > 0) ? $1 + $2 : 0 }' >> "$tmp/pair$e"
  done
}

# Interleaved cells, REPS runs each, medians: one process with 2 threads,
# 2 workers with 1 thread each with the gradient reduced in buckets during
# backward (--overlap, the default) and after it (--overlap=off), sharing
# one copy of the weights (the default) and keeping one each
# (--host-replica=off), and the uncoupled pair. Each run
# trains TRAIN_EPOCHS epochs (default 2) and each epoch's images/s is kept
# apart: the first carries every cell's warm-up (the workers' speed probes
# and first plans, the first touch of every buffer, a cold cache), the
# last is the steady state a run of many epochs trains at.
train() {
  ragtag="$BUILD/src/ragtag"
  epochs=${TRAIN_EPOCHS:-2}
  for model in ${MODELS:-lenet seedcnn}; do
    images=19200
    [ $model = seedcnn ] && images=6400
    for cell in one on off own pair; do for e in $(seq "$epochs"); do : > "$tmp/$cell$e"; done; done
    : > "$tmp/handoff"; : > "$tmp/hone"; : > "$tmp/hon"
    order="one on off own pair"
    for _ in $(seq "$REPS"); do
      # each round starts with the next cell: no cell always follows the same one
      for cell in $order; do
        rm -f "$tmp/m.jsonl"
        if [ $cell = pair ]; then pair "$model" $images "$epochs"; continue; fi
        h0=
        if [ $cell = one ] || [ $cell = on ]; then h0=$(handoff); fi
        if [ $cell = one ]; then echo "$h0" >> "$tmp/handoff"; fi
        case $cell in
          one) flags="--threads 2" ;;
          on) flags="--threads 1 --workers 2" ;;
          off) flags="--threads 1 --workers 2 --overlap=off" ;;
          own) flags="--threads 1 --workers 2 --host-replica=off" ;;
        esac
        ok=1
        "$ragtag" train "$top/examples/$model.cfg" --data fashion-mnist --val 0 --limit $images \
          --epochs "$epochs" --batch 64 --lr 0.01 --momentum 0.9 --progress off \
          --metrics "$tmp/m.jsonl" $flags >/dev/null 2>&1 || { echo "ragtag failed ($model, $cell)"; ok=0; }
        for e in $(seq "$epochs"); do
          if [ $ok = 1 ]; then ips_epoch "$tmp/m.jsonl" "$e"; else echo 0; fi >> "$tmp/$cell$e"
        done
        # the slower placement seen before and after the run: a run the
        # VM moved in the middle counts as far
        if [ $cell = one ] || [ $cell = on ]; then max "$h0" "$(handoff)" >> "$tmp/h$cell"; fi
      done
      order="${order#* } ${order%% *}"
    done
    # where the VM had put the two vCPUs before each 1-process run: ~45 ns
    # (one core complex) or ~185 ns (two), which moves that cell by a third
    echo "# $model: cache-line handoff between the CPUs before each 1-process run (ns): $(paste -sd' ' "$tmp/handoff")"
    for e in $(seq "$epochs"); do
      # (a failed run is a 0 in its round's line: left out of every figure)
      one=$(grep -v '^0$' "$tmp/one$e" | median) on=$(grep -v '^0$' "$tmp/on$e" | median)
      off=$(grep -v '^0$' "$tmp/off$e" | median)
      # each round's own ratios: its cells ran within seconds of each other,
      # so a slow spell of the machine (minutes) weighs on both sides
      pon=$(paste "$tmp/on$e" "$tmp/one$e" | awk '$1 > 0 && $2 > 0 { print $1 / $2 }' | median)
      poff=$(paste "$tmp/off$e" "$tmp/one$e" | awk '$1 > 0 && $2 > 0 { print $1 / $2 }' | median)
      pair=$(grep -v '^0$' "$tmp/pair$e" | median)
      own=$(grep -v '^0$' "$tmp/own$e" | median)
      pown=$(paste "$tmp/own$e" "$tmp/one$e" | awk '$1 > 0 && $2 > 0 { print $1 / $2 }' | median)
      awk -v m=$model -v e="$e" -v a="$one" -v b="$on" -v c="$off" -v r="$REPS" -v pb="$pon" -v pc="$poff" -v p="$pair" -v o="$own" -v po="$pown" 'BEGIN {
        printf "%-8s epoch %d, medians of %d: 1 process x 2 threads %6.0f img/s | 2 workers x 1 thread: overlap %6.0f (ratio %.2f), overlap off %6.0f (ratio %.2f) | median of the rounds'"'"' own ratios: %.2f, %.2f\n",
               m, e, r, a, b, (a > 0 ? b / a : 0), c, (a > 0 ? c / a : 0), pb, pc
        printf "%-8s epoch %d: 2 workers with a copy of the weights each (--host-replica=off) %6.0f img/s (ratio %.2f; rounds: %.2f)\n",
               m, e, o, (a > 0 ? o / a : 0), po
        printf "%-8s epoch %d: 2 uncoupled 1-thread processes, half the batch each, side by side %6.0f img/s (ratio %.2f): the most 2 separate replicas reach here\n",
               m, e, p, (a > 0 ? p / a : 0) }'
      # the rounds' own ratios (overlap) by where the VM had the vCPUs
      # during both runs: near (one core complex) or far
      for where in near far; do
        paste "$tmp/on$e" "$tmp/one$e" "$tmp/hone" "$tmp/hon" | awk -v w=$where -v lim="${NEAR_NS:-90}" \
          '$1 > 0 && $2 > 0 && $3 != "n/a" && $4 != "n/a" && (w == "near") == ($3 < lim && $4 < lim) { print $1 / $2 }' > "$tmp/r$where"
        what="at the near placement (the handoff under ${NEAR_NS:-90} ns before and after both runs)"
        [ $where = far ] && what="at the far placement, or moved during a run"
        printf "%-8s epoch %d: the rounds' own ratios (overlap) %s: %d of %d: %s(median %.2f)\n" \
          "$model" "$e" "$what" "$(grep -c . "$tmp/r$where")" "$REPS" \
          "$(awk '{ printf "%.2f ", $1 }' "$tmp/r$where")" "$(median < "$tmp/r$where")"
      done
    done
  done
}

# What CurveZMQ costs: the same TCP ring and the same 2-worker training
# with credentials (the default: ZeroMQ, encrypted), token links and
# --insecure (raw TCP links), interleaved, best of REPS.
security() {
  ar="$BUILD/bench/bench_allreduce"
  ragtag="$BUILD/src/ragtag"
  [ -x "$ar" ] || { echo "build it first: make bench (in $BUILD)"; exit 1; }
  for n in 2 4; do
    "$ar" -n $n --max "$SIZES_MAX" --links tcp >"$tmp/plain_$n"
    "$ar" -n $n --max "$SIZES_MAX" --links tcp --curve >"$tmp/curve_$n"
    printf "%d procs  raw TCP (--insecure, token)  %s\n" $n "$(summary "$tmp/plain_$n" 6 3)"
    printf "%d procs  ZeroMQ/TCP CurveZMQ          %s\n" $n "$(summary "$tmp/curve_$n" 6 3)"
    paste "$tmp/plain_$n" "$tmp/curve_$n" | awk '/^ *[0-9]/ && $1 >= 65536 {
      printf "    %9d bytes: busbw raw %6.3f GB/s, CurveZMQ %6.3f GB/s (%.2f)\n", $1, $6, $13, $13 / $6 }'
  done
  for model in lenet seedcnn; do
    images=19200
    [ $model = seedcnn ] && images=6400
    plain=0 token=0 curve=0
    for _ in $(seq "$REPS"); do
      for cell in plain token curve; do
        rm -f "$tmp/m.jsonl"
        flags="--threads 1 --workers 2 --no-shm"
        [ $cell = plain ] && flags="$flags --insecure"
        [ $cell = token ] && flags="$flags --link-security token"
        "$ragtag" train "$top/examples/$model.cfg" --data fashion-mnist --val 0 --limit $images \
          --epochs 1 --batch 64 --lr 0.01 --momentum 0.9 --progress off --metrics "$tmp/m.jsonl" \
          $flags >/dev/null 2>&1 || { echo "ragtag failed ($model, $cell)"; continue; }
        v=$(ips "$tmp/m.jsonl")
        case $cell in
          plain) plain=$(max "$plain" "$v") ;;
          token) token=$(max "$token" "$v") ;;
          curve) curve=$(max "$curve" "$v") ;;
        esac
      done
    done
    awk -v m=$model -v a="$plain" -v t="$token" -v b="$curve" 'BEGIN {
      printf "%-8s 2 workers over TCP: --insecure %7.0f img/s | token links %7.0f (%.2f) | CurveZMQ %7.0f (%.2f)\n",
             m, a, t, (a > 0 ? t / a : 0), b, (a > 0 ? b / a : 0) }'
  done
}

# How long local workers take to join: from the coordinator's "waiting up
# to" line to its "[N/N]" line (each line stamped as it is read), N = 2 and
# 4 workers, the median of REPS runs of one step. RAGTAG (default
# $BUILD/src/ragtag) may name another build (before/after).
join() {
  ragtag=${RAGTAG:-$BUILD/src/ragtag}
  for n in 2 4; do
    for _ in $(seq "$REPS"); do
      "$ragtag" train "$top/examples/lenet.cfg" --data fashion-mnist --val 0 --limit 64 \
        --epochs 1 --batch 64 --threads 1 --workers $n --progress off 2>&1 >/dev/null |
        while IFS= read -r line; do echo "$(date +%s.%N) $line"; done |
        awk -v n=$n '/waiting up to/ { t0 = $1 } $0 ~ "\\[" n "/" n "\\]" { t1 = $1 }
                     END { if (t0 && t1) printf "%.1f\n", (t1 - t0) * 1e3 }'
    done | median | awk -v n=$n -v r="$REPS" '{ printf "%d local workers joined in %.1f ms (median of %d runs)\n", n, $1, r }'
  done
}

case $mode in
  allreduce) allreduce ;;
  train) train ;;
  security) security ;;
  join) join ;;
  *) echo "usage: $0 allreduce|train|security|join"; exit 2 ;;
esac
