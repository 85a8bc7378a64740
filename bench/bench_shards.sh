#!/bin/sh
# Training speed (images/s of the training steps, the epoch line's figure)
# from shards on disk next to the same set in memory, same model, same
# seed, same run, interleaved, best of REPS (default 3):
#
#   1. lenet on Fashion-MNIST (its first LENET_IMAGES, default 20,000,
#      images of 28x28; a random set where the Debian package is missing),
#      one epoch, THREADS threads: the model's compute hides the reads (the
#      prefetch thread gathers the next batch meanwhile);
#   2. a tiny model (8x8 average pool + dense: hardly any compute) on
#      60,000 random images of 64x64 (246 MB), one epoch: what the reads
#      cost when nothing hides them. In memory; from shards in the page
#      cache; and, as root, from shards read from disk inside a 64 MB
#      memory cgroup (bench/mem-limit.sh), where the set cannot stay in the
#      page cache and every record is a random pread from the disk.
#
#   bench/bench_shards.sh           the table
#
# Environment: RAGTAG (default ./src/ragtag), REPS, THREADS (default 2),
# LENET_IMAGES.
set -eu
RAGTAG=${RAGTAG:-./src/ragtag}
top=$(cd "$(dirname "$0")/.." && pwd)
REPS=${REPS:-3}
THREADS=${THREADS:-2}
LENET_IMAGES=${LENET_IMAGES:-20000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

u32be() { printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"; }
digits() { head -c "$1" /dev/urandom | tr '\000-\377' '\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\005'; }
mkidx() { # DIR N SIDE: random train images and labels
  mkdir -p "$1"
  { printf '\000\000\010\003'; u32be "$2"; u32be "$3"; u32be "$3"; head -c $(($2 * $3 * $3)) /dev/urandom; } >"$1/train-images-idx3-ubyte"
  { printf '\000\000\010\001'; u32be "$2"; digits "$2"; } >"$1/train-labels-idx1-ubyte"
}
uncache() { for f in "$1"/*.rts; do dd if="$f" iflag=nocache count=0 status=none 2>/dev/null || true; done; }

ips() { # [prefix...] -- model data: images/s of one epoch, or "fail"
  pre=""
  while [ "$1" != -- ]; do pre="$pre $1"; shift; done
  shift
  if $pre "$RAGTAG" train "$1" --data "$2" --val 0 --epochs 1 --seed 5 --threads "$THREADS" \
       ${3:-} --progress lines >"$tmp/log" 2>&1; then
    sed -n 's/.*| \([0-9]*\) img\/s, .*/\1/p' "$tmp/log" | tail -n 1
  else
    echo fail
  fi
}
best() { sort -n | tail -n 1; }

if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || [ -n "${RAGTAG_DATA_DIR:-}" ]; then
  data1=fashion-mnist
else
  mkidx "$tmp/fm" 60000 28
  data1="idx:$tmp/fm"
fi
"$RAGTAG" pack --data "$data1" -o "$tmp/fm-sh" --shards 8 >/dev/null
mkidx "$tmp/big" 60000 64
"$RAGTAG" pack --data "idx:$tmp/big" -o "$tmp/big-sh" --shards 16 >/dev/null
cat >"$tmp/tiny.cfg" <<'EOF'
[net]
input = 64x64x1
classes = 10
[train]
batch = 256
optimizer = sgd
lr = 0.05
[avgpool]
size = 8
[dense]
units = 10
[softmax]
EOF
root=no
[ "$(id -u)" = 0 ] && "$top/bench/mem-limit.sh" 64 -- true 2>/dev/null && root=yes

: >"$tmp/a" ; : >"$tmp/b" ; : >"$tmp/c" ; : >"$tmp/d" ; : >"$tmp/e"
for r in $(seq "$REPS"); do
  ips -- "$top/examples/lenet.cfg" "$data1" "--limit $LENET_IMAGES" >>"$tmp/a"
  ips -- "$top/examples/lenet.cfg" "shards:$tmp/fm-sh" "--limit $LENET_IMAGES" >>"$tmp/b"
  ips -- "$tmp/tiny.cfg" "idx:$tmp/big" >>"$tmp/c"
  ips -- "$tmp/tiny.cfg" "shards:$tmp/big-sh" >>"$tmp/d"
  if [ $root = yes ]; then
    uncache "$tmp/big-sh"
    ips "$top/bench/mem-limit.sh" 64 -- "$tmp/tiny.cfg" "shards:$tmp/big-sh" >>"$tmp/e"
  fi
done
echo "ragtag $("$RAGTAG" --version | cut -d' ' -f2), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), best of $REPS, images/s of one epoch's training steps"
printf '%-52s %12s %12s\n' "" "in memory" "shards"
printf '%-52s %12s %12s\n' "lenet, $data1 ($LENET_IMAGES of 28x28), $THREADS threads" "$(best <"$tmp/a")" "$(best <"$tmp/b")"
printf '%-52s %12s %12s\n' "tiny model, 60,000 of 64x64 (246 MB), page cache" "$(best <"$tmp/c")" "$(best <"$tmp/d")"
if [ $root = yes ]; then
  printf '%-52s %12s %12s\n' "tiny model, same set, from disk in a 64 MB cgroup" "(no room)" "$(best <"$tmp/e")"
else
  echo "(not root: no run in a 64 MB memory cgroup)"
fi
