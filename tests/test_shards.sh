#!/bin/sh
# Data in shards (docs/shards.md), on synthetic IDX sets made here:
#   - pack writes shards and an index; pack --verify reads them back;
#   - training from shards gives the very weights of training from memory
#     (same seed, one process: the saved files are identical; 2 workers:
#     the same parameter hash), every sample once an epoch (the workers'
#     epoch check);
#   - a corrupt record is reported with its shard's name, record and
#     offset, by training and by --verify; a truncated shard, a bad magic,
#     a newer version and an index that does not add up, each by file and
#     offset (or index line);
#   - a cluster: 2 workers read local shards under their --data-dir, each
#     only about its half of the records, with the weights of memory; 2
#     workers get the shards served by the coordinator;
#   - as root, in a 64 MB memory cgroup, 2 workers train 2 epochs on a
#     246 MB set of shards read from disk, where the same set in memory is
#     refused (skipped, saying why, without root or a memory cgroup).
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
LIMIT="$top_srcdir/bench/mem-limit.sh"
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
# Ports: 26000-26999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((26000 + ($$ % 240) * 4))

# u32be N: four bytes, big-endian
u32be() { printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"; }
# labels 0..9 from random bytes
digits() { head -c "$1" /dev/urandom | tr '\000-\377' '\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\011\000-\005'; }
# mkidx DIR PREFIX N SIDE: an IDX image file and its labels, random bytes
mkidx() {
  mkdir -p "$1"
  { printf '\000\000\010\003'; u32be "$3"; u32be "$4"; u32be "$4"; head -c $(($3 * $4 * $4)) /dev/urandom; } >"$1/$2-images-idx3-ubyte"
  { printf '\000\000\010\001'; u32be "$3"; digits "$3"; } >"$1/$2-labels-idx1-ubyte"
}
hash_of() { sed -n 's/.*replicas identical: parameter hash \([0-9a-f]*\).*/\1/p' "$1"; }
reads_of() { sed -n 's/.* \([0-9]*\) training records read from shards.*/\1/p' "$1"; }

N=3000
mkidx "$tmp/idx" train $N 28
mkidx "$tmp/idx" t10k 500 28
model="$top_srcdir/examples/lenet.cfg"
run="--val 0 --seed 11 --threads 1 --progress off"

# 1. pack and verify
if "$RAGTAG" pack --data "idx:$tmp/idx" -o "$tmp/sh" --shards 3 >"$tmp/pack.log" 2>&1 &&
   grep -q "3000 train records in 3 shards, 500 test records in 1" "$tmp/pack.log" &&
   [ "$(grep -c '^shard train-' "$tmp/sh/index")" = 3 ] &&
   [ "$(stat -c %s "$tmp/sh/train-00000.rts")" = $((32 + 1000 * 792)) ] &&
   "$RAGTAG" pack --verify "$tmp/sh" >"$tmp/verify.log" 2>&1 &&
   grep -q "set train: 3000 records in 3 shards, every checksum right" "$tmp/verify.log"; then
  ok "pack: 3 shards of 1000 records of 792 bytes, an index, --verify passes"
else
  bad "pack"
  cat "$tmp/pack.log" "$tmp/verify.log" "$tmp/sh/index"
fi

# 2. the weights of memory, bit for bit
"$RAGTAG" train "$model" --data "idx:$tmp/idx" $run --epochs 2 --save "$tmp/mem.st" >"$tmp/m1.log" 2>&1
m=$?
"$RAGTAG" train "$model" --data "shards:$tmp/sh" $run --epochs 2 --save "$tmp/sh.st" >"$tmp/s1.log" 2>&1
s=$?
if [ $m -eq 0 ] && [ $s -eq 0 ] && cmp -s "$tmp/mem.st" "$tmp/sh.st"; then
  ok "one process, 2 epochs: the weights from shards are the weights from memory, byte for byte"
else
  bad "one process from shards ($m, $s)"
  tail -n 3 "$tmp/m1.log" "$tmp/s1.log"
fi
"$RAGTAG" train "$model" --data "idx:$tmp/idx" $run --epochs 2 --workers 2 --partition static >"$tmp/m2.log" 2>&1
m=$?
"$RAGTAG" train "$model" --data "shards:$tmp/sh" $run --epochs 2 --workers 2 --partition static >"$tmp/s2.log" 2>&1
s=$?
memhash=$(hash_of "$tmp/m2.log")
if [ $m -eq 0 ] && [ $s -eq 0 ] && [ -n "$memhash" ] && [ "$memhash" = "$(hash_of "$tmp/s2.log")" ]; then
  ok "2 local workers, 2 epochs, every sample once an epoch: parameter hash $memhash from memory and from shards"
else
  bad "2 workers from shards ($m, $s)"
  tail -n 3 "$tmp/m2.log" "$tmp/s2.log"
fi

# 3. bad shards: each reported by file and offset
cp -r "$tmp/sh" "$tmp/bad"
# a byte in record 100 of shard 1: offset 32 + 100 * 792 = 79232, +50
printf '\377' | dd of="$tmp/bad/train-00001.rts" bs=1 seek=79282 conv=notrunc 2>/dev/null
cmp -s "$tmp/bad/train-00001.rts" "$tmp/sh/train-00001.rts" && printf '\376' |
  dd of="$tmp/bad/train-00001.rts" bs=1 seek=79282 conv=notrunc 2>/dev/null
want="bad/train-00001.rts: record 100 at offset 79232: checksum mismatch"
"$RAGTAG" train "$model" --data "shards:$tmp/bad" $run --epochs 1 >"$tmp/bad.log" 2>&1
t=$?
"$RAGTAG" pack --verify "$tmp/bad" >"$tmp/badv.log" 2>&1
v=$?
if [ $t -eq 1 ] && grep -q "$want" "$tmp/bad.log" && [ $v -eq 1 ] && grep -q "$want" "$tmp/badv.log"; then
  ok "a corrupt record: '$(grep -o "train-00001.rts: record.*corrupt" "$tmp/bad.log" | head -n 1)'"
else
  bad "a corrupt record ($t, $v)"
  tail -n 2 "$tmp/bad.log" "$tmp/badv.log"
fi
expect_error() { # what pattern: training from $tmp/bad fails saying pattern
  "$RAGTAG" train "$model" --data "shards:$tmp/bad" $run --epochs 1 >"$tmp/e.log" 2>&1
  if [ $? -eq 1 ] && grep -q "$2" "$tmp/e.log"; then ok "$1: '$(grep -o "$2.*" "$tmp/e.log" | head -n 1)'"; else bad "$1"; cat "$tmp/e.log"; fi
  rm -rf "$tmp/bad"
  cp -r "$tmp/sh" "$tmp/bad"
}
rm -rf "$tmp/bad" && cp -r "$tmp/sh" "$tmp/bad"
truncate -s 5000 "$tmp/bad/train-00002.rts"
expect_error "a truncated shard" "bad/train-00002.rts: truncated at offset 5000"
printf 'XX' | dd of="$tmp/bad/train-00000.rts" bs=1 conv=notrunc 2>/dev/null
expect_error "a bad magic" "bad/train-00000.rts: offset 0: not a ragtag shard"
printf '\002' | dd of="$tmp/bad/train-00000.rts" bs=1 seek=8 conv=notrunc 2>/dev/null
expect_error "a newer shard version" "bad/train-00000.rts: offset 8: shard version 2"
sed -i 's/^set train 3000 3/set train 3001 3/' "$tmp/bad/index"
expect_error "an index that does not add up" "bad/index:7: set train declares 3001 records"
rm "$tmp/bad/train-00001.rts"
expect_error "a missing shard" "bad/train-00001.rts: No such file"

# 4. a cluster: local shards under --data-dir, then shards served
coord() { # log flags...
  log=$1
  shift
  "$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" $run "$@" >"$log" 2>&1
}
for w in a b; do
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$w" --threads 1 --connect-timeout 60 \
    --data-dir "$tmp/sh" >"$tmp/w$w.log" 2>&1 &
  pids="$pids $!"
done
coord "$tmp/c1.log" --data "shards:$tmp/sh" --epochs 2 --partition static
c=$?
for p in $pids; do wait "$p"; done
pids=""
ra=$(reads_of "$tmp/wa.log")
rb=$(reads_of "$tmp/wb.log")
if [ $c -eq 0 ] && [ "$(hash_of "$tmp/c1.log")" = "$memhash" ] && [ -n "$ra" ] && [ -n "$rb" ] &&
   [ $((ra + rb)) -ge $((2 * N)) ] && [ "$ra" -lt $((2 * N * 6 / 10)) ] && [ "$rb" -lt $((2 * N * 6 / 10)) ]; then
  ok "2 workers on local shards, 2 epochs of $N: the weights of memory; records read $ra and $rb (each about its half)"
else
  bad "2 workers on local shards ($c; reads '$ra' '$rb')"
  tail -n 3 "$tmp/c1.log" "$tmp/wa.log" "$tmp/wb.log"
fi
port=$((port + 1))
for w in c d; do
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$w" --threads 1 --connect-timeout 60 \
    --cache "$tmp/cache-$w" >"$tmp/w$w.log" 2>&1 &
  pids="$pids $!"
done
coord "$tmp/c2.log" --data "shards:$tmp/sh" --serve-data --epochs 1
c=$?
for p in $pids; do wait "$p"; done
pids=""
if [ $c -eq 0 ] && grep -q "replicas identical" "$tmp/c2.log" &&
   grep -q "sent train-00002.rts" "$tmp/c2.log" && [ -n "$(reads_of "$tmp/wc.log")" ] &&
   cmp -s "$tmp/cache-d/sets/"*/train-00001.rts "$tmp/sh/train-00001.rts"; then
  ok "2 workers with shards served by the coordinator: index and shards in their caches, one epoch"
else
  bad "shards served ($c)"
  tail -n 3 "$tmp/c2.log" "$tmp/wc.log" "$tmp/wd.log"
fi

# 5. larger than memory: 60,000 images of 64x64 (246 MB) in a 64 MB cgroup
if [ "$(id -u)" != 0 ]; then
  echo "SKIP (part 5): memory-limited cgroups need root"
elif ! "$LIMIT" 64 -- true 2>/dev/null; then
  echo "SKIP (part 5): no memory-limited cgroup can be made here"
else
  mkidx "$tmp/big" train 60000 64
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
  "$RAGTAG" pack --data "idx:$tmp/big" -o "$tmp/bigsh" --shards 16 >"$tmp/bp.log" 2>&1
  p=$?
  # not from the page cache pack filled (charged to pack's group): from disk, in the limit
  for f in "$tmp/bigsh"/*.rts; do dd if="$f" iflag=nocache count=0 status=none 2>/dev/null; done
  "$LIMIT" 64 -- "$RAGTAG" train "$tmp/tiny.cfg" --data "shards:$tmp/bigsh" --epochs 2 --workers 2 \
    --threads 1 --seed 3 --progress off >"$tmp/big.log" 2>&1
  s=$?
  "$LIMIT" 64 -- "$RAGTAG" train "$tmp/tiny.cfg" --data "idx:$tmp/big" --epochs 1 --workers 2 \
    --threads 1 --seed 3 --progress off >"$tmp/bigm.log" 2>&1
  m=$?
  if [ $p -eq 0 ] && [ $s -eq 0 ] && grep -q "done: 2 epochs, 422 steps" "$tmp/big.log" &&
     grep -q "replicas identical" "$tmp/big.log" && grep -q "limit 64 MB" "$tmp/big.log" &&
     [ $m -ne 0 ] && grep -q "but its memory limit is 64 MB" "$tmp/bigm.log"; then
    ok "246 MB of shards, 2 workers in 64 MB: 2 epochs, every sample once an epoch; in memory refused"
    grep "peak memory" "$tmp/big.log"
  else
    bad "larger than memory (pack $p, shards $s, memory $m)"
    tail -n 4 "$tmp/bp.log" "$tmp/big.log" "$tmp/bigm.log"
  fi
fi

[ $fails -eq 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
