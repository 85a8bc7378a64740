#!/bin/sh
# Only invited machines join (docs/cluster.md, "Security"), with real
# processes on 127.0.0.x:
#   - ragtag keygen writes private files; secrets open to others are refused;
#   - strangers (a ZeroMQ client without keys, one with a wrong coordinator
#     key or a wrong token, `ragtag worker` with a wrong token, with an old
#     join string, and well-formed NaN chunks to every ring inbox) get no
#     byte of the run, the workers with bad credentials say why and exit,
#     and the run ends with the replica hash of an undisturbed run;
#   - beyond loopback: no credentials is a refusal with the instruction,
#     --insecure a warning (at start and in the cluster table);
#   - a coordinator that names a local file as data gets a refusal, and
#     with --data-dir a parse error without the file's bytes.
set -u
RAGTAG=${RAGTAG:-$top_builddir/src/ragtag}
STRANGER=${STRANGER:-$top_builddir/tests/net_stranger}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
model="$top_srcdir/examples/lenet.cfg"
fails=0
# Ports: 25000-25999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((25000 + ($$ % 97) * 10))
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
mode() { stat -c %a "$1"; }
# lines of FILE matching RE; 0 while FILE does not exist yet (a process
# started in the background creates its log when it runs, not at once)
count() { cat "$2" 2>/dev/null | grep -c "$1"; }

# ---- keygen and file permissions ----------------------------------------------------
"$RAGTAG" keygen "$tmp/k" >"$tmp/keygen.log" 2>&1 || bad "ragtag keygen"
"$RAGTAG" keygen "$tmp/old" >/dev/null 2>&1 || bad "ragtag keygen (a second set)"
if [ "$(mode "$tmp/k")" = 700 ] && [ "$(mode "$tmp/k/secret.key")" = 600 ] &&
   [ "$(mode "$tmp/k/token")" = 600 ] && [ "$(mode "$tmp/k/join")" = 600 ] &&
   grep -q "^public key: " "$tmp/keygen.log"; then
  ok "keygen: DIR 700, secret.key, token and join 600"
else bad "keygen modes: $(ls -la "$tmp/k")"; fi
"$RAGTAG" keygen "$tmp/k" >/dev/null 2>&1 && bad "keygen overwrote existing keys" ||
  ok "keygen never overwrites existing keys"
chmod 640 "$tmp/k/secret.key"
"$RAGTAG" coord "$model" --workers 1 --listen "tcp://127.0.0.1:$port" --keys "$tmp/k" \
  --join-timeout 1 >"$tmp/perm.log" 2>&1; st=$?
chmod 600 "$tmp/k/secret.key"
cp "$tmp/k/join" "$tmp/join644"; chmod 644 "$tmp/join644"
"$RAGTAG" worker --join "tcp://127.0.0.1:$port" --join-file "$tmp/join644" \
  --connect-timeout 1 >"$tmp/perm2.log" 2>&1; st2=$?
if [ $st -ne 0 ] && grep -q "secret.key may be read by group or others (mode 0640)" "$tmp/perm.log" &&
   [ $st2 -ne 0 ] && grep -q "join644 may be read by group or others" "$tmp/perm2.log"; then
  ok "key and join files readable by group or others are refused, naming the file"
else bad "permissions ($st, $st2)"; cat "$tmp/perm.log" "$tmp/perm2.log"; fi

# ---- an undisturbed run and a disturbed one: the same replica hash ---------------------
run="--data fashion-mnist --limit 4800 --val 0.1 --epochs 2 --batch 48 --partition static
  --progress lines --seed 7"
secure_run() { # tag: a coordinator with --keys and 2 workers with the join file
  tag=$1
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" --keys "$tmp/k" \
    --no-shm $run >"$tmp/c-$tag.log" 2>&1 & c=$!
  for n in a b; do
    "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --join-file "$tmp/k/join" --name "$n" \
      --threads 1 --connect-timeout 30 >"$tmp/$n-$tag.log" 2>&1 &
    pids="$pids $!"
  done
}
hash_of() { sed -n 's/.*parameter hash \([0-9a-f]*\) on all.*/\1/p' "$1"; }
secure_run calm
wait $c; st=$?
h0=$(hash_of "$tmp/c-calm.log")
[ $st -eq 0 ] && [ -n "$h0" ] && ok "an undisturbed run with --keys: hash $h0" ||
  { bad "undisturbed run (status $st)"; tail -n 20 "$tmp/c-calm.log"; }
if grep -q "RAGTAG_JOIN=rtj1-[0-9a-f]*-[0-9a-f]* ragtag worker --join tcp://127.0.0.1:$port" \
   "$tmp/c-calm.log" && grep -q "links CurveZMQ, workers admitted by the join token" "$tmp/c-calm.log"; then
  ok "the coordinator prints the one line workers join with"
else bad "no join line"; head -n 5 "$tmp/c-calm.log"; fi

secure_run storm
ep="tcp://127.0.0.1:$port"
i=0
while [ $i -lt 300 ] && [ "$(count ' joined from ' "$tmp/c-storm.log")" -lt 2 ]; do sleep 0.1; i=$((i + 1)); done
runid=$(sed -n 's/.*run \([0-9a-f]\{32\}\): waiting.*/\1/p' "$tmp/c-storm.log")
rings=$(sed -n 's/.* joined from .*, \(tcp:\/\/[0-9.]*:[0-9]*\)).*/\1/p' "$tmp/c-storm.log")
key=$(sed 's/^rtj1-\([0-9a-f]*\)-.*/\1/' "$tmp/k/join")
oldtoken=$(sed 's/.*-//' "$tmp/old/join")
badtoken="rtj1-$key-$oldtoken"
"$STRANGER" hello "$ep" 3 >"$tmp/s1" 2>&1 &
"$STRANGER" hello "$ep" 3 "$(cat "$tmp/old/join")" >"$tmp/s2" 2>&1 &
"$STRANGER" hello "$ep" 3 "$badtoken" >"$tmp/s3" 2>&1 &
for r in $rings; do "$STRANGER" ring "$r" 2 "$runid" >/dev/null 2>&1 & done
RAGTAG_JOIN=$badtoken "$RAGTAG" worker --join "$ep" --name intruder1 --threads 1 \
  --connect-timeout 20 >"$tmp/w-token.log" 2>&1 & w1=$!
"$RAGTAG" worker --join "$ep" --join-file "$tmp/old/join" --name intruder2 --threads 1 \
  --connect-timeout 20 >"$tmp/w-old.log" 2>&1 & w2=$!
"$RAGTAG" worker --join "$ep" --insecure --name intruder3 --threads 1 \
  --connect-timeout 20 >"$tmp/w-plain.log" 2>&1 & w3=$!
wait $c; st=$?
wait $w1; s1=$?; wait $w2; s2=$?; wait $w3; s3=$?
wait
h1=$(hash_of "$tmp/c-storm.log")
if [ $st -eq 0 ] && [ -n "$h0" ] && [ "$h1" = "$h0" ] && [ -n "$rings" ]; then
  ok "strangers at the coordinator and every ring inbox: the run ends with the undisturbed hash $h1"
else bad "disturbed run (status $st, hash '$h1', undisturbed '$h0')"; tail -n 20 "$tmp/c-storm.log"; fi
if grep -q "^received 0 bytes in 0 messages" "$tmp/s1" && grep -q "^received 0 bytes" "$tmp/s2" &&
   grep -q "^received 0 bytes" "$tmp/s3"; then
  ok "a ZeroMQ client without keys, with a wrong coordinator key, with a wrong token: 0 bytes received"
else bad "strangers received something: $(cat "$tmp/s1" "$tmp/s2" "$tmp/s3")"; fi
if [ $s1 -ne 0 ] && grep -q "refused this worker (status 400): its join token is not this run's" "$tmp/w-token.log" &&
   [ $s2 -ne 0 ] && grep -q "the coordinator key in the join string is not this coordinator's" "$tmp/w-old.log" &&
   [ $s3 -ne 0 ] && grep -q "speaks CurveZMQ and this worker runs --insecure" "$tmp/w-plain.log" &&
   ! grep -q "joined run" "$tmp/w-token.log" "$tmp/w-old.log" "$tmp/w-plain.log"; then
  ok "ragtag worker with a wrong token, an old join string, or no keys: refused, saying why"
else bad "intruder workers ($s1 $s2 $s3)"; cat "$tmp/w-token.log" "$tmp/w-old.log" "$tmp/w-plain.log"; fi
if grep -q "\[coord\] refused a connection from 127.0.0.1: not invited" "$tmp/c-storm.log" &&
   [ "$(grep -c 'refused a connection from 127.0.0.1' "$tmp/c-storm.log")" -eq 1 ] &&
   [ "$(grep -c 'refused a connection from a client of' "$tmp/c-storm.log")" -eq 1 ] &&
   ! cat "$tmp/a-storm.log" "$tmp/b-storm.log" | grep -q "dropped a message" &&
   ! grep -q "evil\|intruder" "$tmp/c-storm.log"; then
  ok "refusals logged once per address per minute; no stranger was ever a member"
else bad "refusal log"; grep -h "refused\|evil\|intruder" "$tmp/c-storm.log" "$tmp/a-storm.log" "$tmp/b-storm.log"; fi

# ---- token links: between workers authenticated, not encrypted; the same maths ---------
# Workers with their own keys (--authorized-keys), so that a stranger can
# present a real member's key (with a guessed link secret).
"$RAGTAG" keygen "$tmp/wa" >/dev/null 2>&1 && "$RAGTAG" keygen "$tmp/wb" >/dev/null 2>&1 ||
  bad "keygen for the workers"
cat "$tmp/wa/public.key" "$tmp/wb/public.key" >"$tmp/authorized"
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" --keys "$tmp/k" \
  --authorized-keys "$tmp/authorized" --no-shm $run --link-security token \
  >"$tmp/c-token.log" 2>&1 & c=$!
for n in a b; do
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --join-file "$tmp/k/join" --keys "$tmp/w$n" \
    --name "$n" --threads 1 --connect-timeout 30 >"$tmp/$n-token.log" 2>&1 &
done
i=0
while [ $i -lt 300 ] && [ "$(count ' joined from ' "$tmp/c-token.log")" -lt 2 ]; do sleep 0.1; i=$((i + 1)); done
runid=$(sed -n 's/.*run \([0-9a-f]\{32\}\): waiting.*/\1/p' "$tmp/c-token.log")
rings=$(sed -n 's/.* joined from .*, \(tcp:\/\/[0-9.]*:[0-9]*\)).*/\1/p' "$tmp/c-token.log")
for r in $rings; do # worker a's key with a guessed link secret, and no credentials at all
  "$STRANGER" ring "$r" 3 "$runid" "$(cat "$tmp/wa/public.key")" \
    0123456789abcdef0123456789abcdef >/dev/null 2>&1 &
  "$STRANGER" ring "$r" 3 "$runid" >/dev/null 2>&1 &
done
wait $c; st=$?
wait
h2=$(hash_of "$tmp/c-token.log")
if [ $st -eq 0 ] && [ -n "$h0" ] && [ "$h2" = "$h0" ] && [ -n "$rings" ] &&
   grep -q "links CurveZMQ control, token links between workers" "$tmp/c-token.log" &&
   grep -q "authenticated but not encrypted" "$tmp/c-token.log" &&
   grep -q "refused a connection from 127.0.0.1: a member's key with a wrong link secret" \
     "$tmp/a-token.log" "$tmp/b-token.log" &&
   ! cat "$tmp/a-token.log" "$tmp/b-token.log" | grep -q "dropped a message"; then
  ok "--link-security token over TCP: the hash of the CurveZMQ run ($h2); a member's key with a guessed link secret is refused"
else bad "token links (status $st, hash '$h2', CurveZMQ '$h0')"; tail -n 12 "$tmp/c-token.log"; grep -h "refused\|dropped\|error" "$tmp/a-token.log" "$tmp/b-token.log"; fi

# ---- beyond loopback ---------------------------------------------------------------------
addr=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -v '^127\.' | grep '^[0-9.]*$' | head -n 1)
if [ -z "$addr" ]; then
  echo "SKIP (part): no address of this machine other than 127.x (hostname -I): the refusal beyond loopback is not tested"
else
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 1 --listen "tcp://$addr:$port" --join-timeout 5 \
    >"$tmp/open.log" 2>&1; st=$?
  if [ $st -ne 0 ] && grep -q "refusing to listen on tcp://$addr:$port without credentials" "$tmp/open.log" &&
     grep -q "ragtag keygen DIR" "$tmp/open.log"; then
    ok "no credentials beyond loopback ($addr): refused with the instruction"
  else bad "beyond loopback without credentials (status $st)"; cat "$tmp/open.log"; fi
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 1 --listen "tcp://$addr:$port" --insecure \
    --data fashion-mnist --limit 480 --epochs 1 --batch 48 >"$tmp/insecure.log" 2>&1 & c=$!
  "$RAGTAG" worker --join "tcp://$addr:$port" --insecure --threads 1 --connect-timeout 20 \
    >"$tmp/insecure-w.log" 2>&1
  wait $c; st=$?
  if [ $st -eq 0 ] && grep -q "WARNING: --insecure: the links of this run are neither authenticated nor encrypted" "$tmp/insecure.log" &&
     grep -q "links INSECURE" "$tmp/insecure.log" && grep -q "WARNING: --insecure" "$tmp/insecure-w.log"; then
    ok "--insecure on $addr: a warning at start and in the cluster table"
  else bad "--insecure (status $st)"; cat "$tmp/insecure.log"; fi
fi

# ---- a coordinator that names a local file as data ----------------------------------------
mkdir -p "$tmp/data"
printf 'label,p1\nSECRETCONTENT,1\n' >"$tmp/data/secret.csv"
for how in refused allowed; do
  port=$((port + 1))
  [ $how = allowed ] && extra="--data-dir $tmp/data" || extra=""
  "$RAGTAG" coord "$model" --workers 1 --listen "tcp://127.0.0.1:$port" --join-timeout 20 \
    --data "csv:$tmp/data/secret.csv" --epochs 1 >"$tmp/rogue-$how.log" 2>&1 & c=$!
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --threads 1 --connect-timeout 20 $extra \
    >"$tmp/victim-$how.log" 2>&1; ws=$?
  wait $c; st=$?
  if [ $how = refused ]; then
    grep -q "opens no path a coordinator names unless it lies under a --data-dir" "$tmp/rogue-$how.log" &&
      grep -q "opens no path" "$tmp/victim-$how.log" && r=0 || r=1
  else
    grep -q "SECRETCONTENT" "$tmp/victim-$how.log" && grep -q "no file content is sent" "$tmp/rogue-$how.log" &&
      r=0 || r=1
  fi
  if [ $r -eq 0 ] && [ $st -ne 0 ] && [ $ws -ne 0 ] && ! grep -q "SECRETCONTENT" "$tmp/rogue-$how.log"; then
    [ $how = refused ] && ok "a coordinator naming a local path gets a refusal; no byte of the file leaves" ||
      ok "with --data-dir the file is read; its parse error reaches the coordinator without the file's bytes"
  else bad "rogue coordinator, $how ($st, $ws)"; cat "$tmp/rogue-$how.log" "$tmp/victim-$how.log"; fi
done

[ $fails -eq 0 ] && echo "all security tests passed" || echo "$fails failed"
[ $fails -eq 0 ]
