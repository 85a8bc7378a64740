#!/bin/sh
# The ragtag command line: help, version, and a clear message (and exit
# status 2) for every kind of wrong flag or value. TAP output.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
lenet="$top_srcdir/examples/lenet.cfg"
n=0; failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect STATUS PATTERN DESCRIPTION -- ARGS...: exit status and a pattern in stdout+stderr
expect() {
  want=$1; pattern=$2; what=$3; shift 4
  n=$((n + 1))
  "$RAGTAG" "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -eq "$want" ] && grep -q -- "$pattern" "$tmp/out"; then
    echo "ok $n - $what"
  else
    echo "not ok $n - $what (exit $got, wanted $want; output:)"
    sed 's/^/#   /' "$tmp/out" | head -n 20
    failed=$((failed + 1))
  fi
}

expect 0 "^ragtag [0-9]" "--version prints the version" -- --version
expect 0 "commands:" "--help lists the commands" -- --help
expect 2 "usage: ragtag" "no command prints usage" --
expect 2 "unknown command 'trian'" "unknown command is named" -- trian
expect 0 "--patience N" "train --help lists the flags" -- train --help
expect 0 "--weights" "eval --help" -- eval --help
expect 0 "summary MODEL.cfg" "summary --help" -- summary --help
expect 0 "SGEMM" "devices --help" -- devices --help
# The binary of the build tree finds the modules built next to it, with no
# RAGTAG_BACKEND_PATH and no make install.
if [ -f "${top_builddir:-.}/backends/opencl/.libs/ragtag-opencl.so" ]; then
  n=$((n + 1))
  if env -u RAGTAG_BACKEND_PATH "$RAGTAG" devices 2>&1 | grep -q "^opencl   0 "; then
    echo "ok $n - the build tree's ragtag finds the opencl module built next to it"
  else
    echo "not ok $n - the build tree's ragtag does not find backends/opencl/.libs/ragtag-opencl.so"
    env -u RAGTAG_BACKEND_PATH "$RAGTAG" devices 2>&1 | sed 's/^/#   /'
    failed=$((failed + 1))
  fi
fi
expect 2 "unknown flag '--lrr'" "a misspelt flag is named" -- train "$lenet" --lrr 0.1
expect 2 "lr: 'fast' is not accepted (expected a number" "a bad number says what is accepted" -- train "$lenet" --lr fast
expect 2 "expected sgd, adam, adamw or nadam" "a bad optimizer lists the choices" -- train "$lenet" --optimizer rmsprop
expect 2 "expected an integer from 1" "a zero batch is refused" -- train "$lenet" --batch 0
expect 2 "needs a value" "a flag without its value" -- train "$lenet" --epochs
expect 2 "needs a model file" "train without a model" -- train --epochs 1
expect 1 "nosuch.cfg" "a missing model file is named" -- train "$tmp/nosuch.cfg"
expect 1 "no backend named 'quantum'" "an unknown backend is named" -- train "$lenet" --backend quantum --limit 100 --progress off
expect 2 "needs --weights" "eval without weights" -- eval "$lenet"
expect 0 "Total params: 61,706" "summary of lenet" -- summary "$lenet"
expect 0 "Total params: 1,048,853" "summary of seedcnn" -- summary "$top_srcdir/examples/seedcnn.cfg"
expect 0 "cpu" "devices lists the cpu backend" -- devices
# a CPU quota (docker --cpus) is seen, so a worker's speed accounts for it
if [ "$(id -u)" = 0 ] && "$top_srcdir/bench/cpu-quota.sh" 0.3 -- true >/dev/null 2>&1; then
  n=$((n + 1))
  if "$top_srcdir/bench/cpu-quota.sh" 0.3 -- "$RAGTAG" devices 2>&1 | grep -q "cpu quota: 0.30 cores"; then
    echo "ok $n - devices shows the cgroup's CPU quota"
  else
    echo "not ok $n - devices in a 0.3-core cgroup does not show 'cpu quota: 0.30 cores'"
    failed=$((failed + 1))
  fi
  # Two equal workers sharing 0.6 of a core are frozen for 40 ms of every
  # 100 ms CFS period. Their speeds are CPU time, so their shares stay put;
  # timed by the wall clock, a freeze in one 16-step window and not in the
  # next swung the shares about 20 times in these 400 steps.
  if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    n=$((n + 1))
    rc=0
    "$top_srcdir/bench/cpu-quota.sh" 0.6 -- "$RAGTAG" train "$lenet" --workers 2 --threads 1 \
      --partition balanced --limit 12800 --epochs 2 --val 0 --progress lines >"$tmp/quota.log" 2>&1 || rc=$?
    swings=$(grep -c 'a speed changed' "$tmp/quota.log" || true)
    if [ $rc = 0 ] && [ "$swings" -le 8 ]; then
      echo "ok $n - two equal workers in one CPU quota keep their shares ($swings re-plans in 400 steps)"
    else
      echo "not ok $n - two equal workers in one CPU quota: status $rc, $swings re-plans in 400 steps (at most 8)"
      grep 'plan\]' "$tmp/quota.log" | head -n 12 | sed 's/^/#   /'
      failed=$((failed + 1))
    fi
  fi
else
  echo "# not root or no writable cpu cgroup: the CPU quota checks are skipped"
fi
expect 2 "expected sync, average or gossip" "a bad --mode lists the modes" -- train "$lenet" --mode async
expect 2 "expected balanced or static" "a bad --partition lists the choices" -- train "$lenet" --partition fair
expect 2 "throttle: '2' is not accepted (expected a number in (0, 1]" "a throttle above 1 is refused" -- train "$lenet" --throttle 1,2
expect 2 "expected fractions in (0, 1], comma separated" "an empty throttle item is refused" -- train "$lenet" --throttle 1,,0.5
expect 1 "--throttle is a testing aid for workers" "throttle without workers" -- train "$lenet" --throttle 0.5 --limit 100 --progress off
expect 2 "max-restarts: '-1' is not accepted (expected an integer from 0 to 100)" "a negative --max-restarts is refused" -- train "$lenet" --workers 2 --max-restarts -1
expect 1 "--max-restarts starts local workers again: give --workers N" "--max-restarts without workers" -- train "$lenet" --max-restarts 2 --limit 100 --progress off
expect 2 "tcp://127.0.0.1:99999' is not accepted (expected tcp://\*:PORT or tcp://ADDRESS:PORT, PORT from 1 to 65535" "coord --listen with a port past 65535 is refused (libzmq listened on 34463)" -- coord "$lenet" --workers 2 --listen tcp://127.0.0.1:99999
expect 2 "join 'tcp://127.0.0.1:99999': expected tcp://HOST:PORT, PORT from 1 to 65535" "worker --join with a port past 65535 is refused" -- worker --join tcp://127.0.0.1:99999
expect 2 "unknown flag '--max-restarts'" "coord has no local workers to restart" -- coord "$lenet" --workers 2 --listen tcp://127.0.0.1:1 --max-restarts 2
expect 2 "--throttle '0': a fraction in (0, 1]" "worker --throttle 0 is refused" -- worker --join tcp://127.0.0.1:1 --throttle 0

# a bad value in the model file's [train] section names file:line
printf '[net]\ninput = 28x28x1\nclasses = 10\n[train]\nlr = -1\n[dense]\nunits = 10\n[softmax]\n' >"$tmp/bad.cfg"
expect 1 "bad.cfg:5" "a bad [train] value names file:line" -- train "$tmp/bad.cfg"

# a --ring-port another program holds: the worker says so and what to do.
# Port: 16000-16499, this test's own block (below Linux's ephemeral range).
if command -v python3 >/dev/null 2>&1; then
  rp=$((16000 + $$ % 500))
  hold_port() { # port seconds: another program listens there that long ($holder)
    rm -f "$tmp/held"
    python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1]))); s.listen(); open(sys.argv[2], "w").close()
time.sleep(float(sys.argv[3]))' "$1" "$tmp/held" "$2" &
    holder=$!
    i=0; while [ ! -f "$tmp/held" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  }
  hold_port "$rp" 60
  expect 1 "ring-port $rp is taken on this host: give another (below 32768), or leave --ring-port out" \
    "a --ring-port in use is named, with what to do (after 10 s of trying)" -- worker \
    --join tcp://127.0.0.1:1 --insecure --ring-port "$rp" --connect-timeout 1
  kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
  # held for 2 s (a worker of a torn-down Spark task that is ending): the
  # new worker waits for the port, binds it and goes on to join
  hold_port "$rp" 2
  expect 1 "ring inbox tcp://127.0.0.1:$rp;" \
    "a --ring-port held for 2 s: the worker waits, binds it and goes on" -- worker \
    --join tcp://127.0.0.1:1 --insecure --ring-port "$rp" --connect-timeout 1
  grep -q "ring-port $rp is in use; trying again" "$tmp/out" && ! grep -q "is taken on this host" "$tmp/out" ||
    { echo "not ok - the wait for a held --ring-port said nothing, or gave up"; failed=$((failed + 1)); }
  wait "$holder" 2>/dev/null
else
  echo "# no python3: the taken --ring-port check is skipped"
fi

# training writes weights that eval reads
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  expect 0 "done: 1 epochs" "a short training run" -- train "$lenet" --epochs 1 --limit 640 --val 0.1 --batch 64 --progress lines --save "$tmp/w.safetensors"
  expect 0 "confusion matrix" "eval prints the confusion matrix" -- eval "$lenet" --weights "$tmp/w.safetensors" --limit 1000
  # --save where no file can be made: refused at the start, not after the
  # training (it used to fail once every epoch had run), alone and in a cluster
  for w in "" "--workers 2"; do
    n=$((n + 1))
    # shellcheck disable=SC2086 # --workers 2: two words
    "$RAGTAG" train "$lenet" $w --epochs 1 --limit 640 --progress lines \
      --save "$tmp/none/w.safetensors" >"$tmp/out" 2>&1
    got=$?
    if [ $got = 1 ] && grep -q "w.safetensors: cannot create a file in $tmp/none" "$tmp/out" &&
       ! grep -q "^epoch 1/" "$tmp/out"; then
      echo "ok $n - --save in a missing directory is refused before training ${w:-(one process)}"
    else
      echo "not ok $n - --save in a missing directory ${w:-(one process)}: exit $got"
      sed 's/^/#   /' "$tmp/out" | tail -n 5
      failed=$((failed + 1))
    fi
  done
  # lenet.cfg's cosine schedule with its warm-up longer than the run: what to change
  expect 1 "cosine schedule needs total steps (1) > warm-up steps (1): train longer (--epochs, --limit), warm up less (--warmup E), or use --schedule constant" \
    "a run shorter than its warm-up says what to change" -- train "$lenet" --epochs 1 --limit 64 --progress off
  printf 'garbage' >"$tmp/bad.safetensors"
  expect 1 "bad.safetensors" "eval of a corrupt weights file names it" -- eval "$lenet" --weights "$tmp/bad.safetensors"
else
  echo "# Fashion-MNIST not installed: skipping the training checks"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
