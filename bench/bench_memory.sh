#!/bin/sh
# Peak memory (max RSS) of training lenet and seedcnn on Fashion-MNIST:
# ragtag (one process, and a cluster worker fed by `coord --serve-data`)
# next to PyTorch (Debian's python3-torch and PyPI's torch), same machine,
# same run, same work: one epoch on IMAGES images (default 6400) out of the
# full Fashion-MNIST loaded, batch 64, SGD momentum 0.9, THREADS threads
# (default 2). Also ragtag with RAGTAG_DATA_FLOAT=1, the float32 copy of
# the data set it kept before issue 18, to show what the bytes save.
#
#   bench/bench_memory.sh                 the table
#   IMAGES=0 bench/bench_memory.sh        whole epochs (54,000 images)
#
# Environment: RAGTAG (default ./src/ragtag), SHARED (default ../shared),
# PYPI_PYTHON (an interpreter with PyPI's torch; default ~/venvs/torch-pypi/bin/python,
# made by: python3 -m venv ~/venvs/torch-pypi && ~/venvs/torch-pypi/bin/pip install torch numpy),
# PORT (default 51900, the coordinator's). A peer that is missing prints "-".
# Max RSS is GNU time's %M (getrusage's ru_maxrss), in MB of 2^20 bytes.
set -eu
RAGTAG=${RAGTAG:-./src/ragtag}
top=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SHARED:-$top/../shared}
PYPI_PYTHON=${PYPI_PYTHON:-$HOME/venvs/torch-pypi/bin/python}
IMAGES=${IMAGES:-6400}
THREADS=${THREADS:-2}
PORT=${PORT:-51900}
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "bench_memory.sh: needs GNU time (apt-get install time)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
limit_flag() { [ "$IMAGES" -gt 0 ] && echo "--limit $IMAGES" || true; }

mb() { awk '{ printf "%.0f", $1 / 1024 }' "$1" 2>/dev/null || echo -; }

ragtag_one() { # model [env] -> max RSS MB of `ragtag train`
  env ${2:-} "$TIME" -f %M -o "$tmp/rss" "$RAGTAG" train "$top/examples/$1.cfg" --val 0 \
    $(limit_flag) --epochs 1 --batch 64 --lr 0.01 --momentum 0.9 --optimizer sgd \
    --threads "$THREADS" --progress off >"$tmp/log" 2>&1 && mb "$tmp/rss" || echo fail
}

ragtag_worker() { # model [env] -> max RSS MB of a worker (data served by the coordinator)
  PORT=$((PORT + 1))
  "$RAGTAG" coord "$top/examples/$1.cfg" --workers 1 --listen "tcp://127.0.0.1:$PORT" \
    --serve-data --val 0 $(limit_flag) --epochs 1 --batch 64 --lr 0.01 --momentum 0.9 \
    --optimizer sgd --progress off >"$tmp/clog" 2>&1 &
  c=$!
  env ${2:-} "$TIME" -f %M -o "$tmp/rss" "$RAGTAG" worker --join "tcp://127.0.0.1:$PORT" \
    --threads "$THREADS" --cache "$tmp/cache" --connect-timeout 30 >"$tmp/wlog" 2>&1 || true
  if wait "$c"; then mb "$tmp/rss"; else echo fail; fi
}

torch_rss() { # python model -> max RSS MB
  [ -x "$1" ] && "$1" -c 'import torch' 2>/dev/null || { echo -; return; }
  tl=$([ "$IMAGES" -gt 0 ] && echo "--train-limit $IMAGES" || true)
  "$TIME" -f %M -o "$tmp/rss" "$1" "$SHARED/bench/torch_fmnist.py" --model "$2" \
    --threads "$THREADS" --blas-threads 1 --epochs 1 --batch 64 --lr 0.01 $tl >"$tmp/tlog" 2>&1 &&
    mb "$tmp/rss" || echo fail
}

version() { "$1" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "not installed"; }
echo "# max RSS in MB, one epoch of ${IMAGES} images (0: all) of the full Fashion-MNIST, batch 64, $THREADS threads"
echo "# torch (Debian): $(version /usr/bin/python3); torch (PyPI): $(version "$PYPI_PYTHON")"
printf '%-8s %12s %13s %12s %14s %14s\n' model "ragtag train" "ragtag worker" "worker f32" \
  "torch Debian" "torch PyPI"
for model in lenet seedcnn; do
  printf '%-8s %12s %13s %12s %14s %14s\n' "$model" "$(ragtag_one "$model")" \
    "$(ragtag_worker "$model")" "$(ragtag_worker "$model" RAGTAG_DATA_FLOAT=1)" \
    "$(torch_rss /usr/bin/python3 "$model")" "$(torch_rss "$PYPI_PYTHON" "$model")"
done
echo "# worker f32: a worker with RAGTAG_DATA_FLOAT=1 (the data set as float32, as before issue 18)"
