#!/bin/sh
# A cut link between hosts (sync mode): the coordinator and 4 workers each
# in its own network namespace (tests/netns-lib.sh: a bridge, veth pairs,
# a private /dev/shm and host name per host, so the ring goes over TCP as
# between machines). Mid-run one worker host's link goes down (`ip link set
# eth0 down`): the coordinator must drop that worker within --worker-timeout
# (+3 s) and the 3 others go on; the link comes back. The run must end with
# status 0, identical replicas, every epoch's "samples" exact, and no
# process left. The cut-off worker must also find it was dropped and join
# again as a new member ("admitted"): it waits for the coordinator up to
# --coord-timeout, and once the link is back the coordinator tells it the
# run went on without it. Root only: skips (77) otherwise.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
. "$top_srcdir/tests/netns-lib.sh"
why=$(rtf_ns_usable) || { echo "SKIP: $why"; exit 77; }

P=rtf$$ # namespaces rtfPID-sw, -c, -1..-4
T=4     # --worker-timeout
epochs=10
ntrain=10800
tmp=$(mktemp -d /tmp/ragtag-netns.XXXXXX)
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null; done
  rtf_ns_down "$P" 4
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# wait up to $2 tenths of a second for pid $1 to end: 0 when it did
running() { [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != "" ] &&
  [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]; } # a zombie has ended
gone_within() {
  i=0
  while running "$1"; do
    [ $i -ge "$2" ] && return 1
    sleep 0.1; i=$((i + 1))
  done
}

rtf_ns_up "$P" 4 || { bad "cannot build the namespaces"; exit 1; }
port=$((34000 + $$ % 3000))
join=tcp://10.250.0.1:$port
# beyond loopback a coordinator needs credentials: the workers get the join string from a file
"$RAGTAG" keygen "$tmp/keys" >/dev/null || bad "ragtag keygen"
( rtf_ns_exec "$P-c" hc "$RAGTAG" coord "$top_srcdir/examples/lenet.cfg" --workers 4 --listen "$join" \
    --keys "$tmp/keys" \
    --data fashion-mnist --limit 12000 --val 0.1 --batch 48 --partition static --progress lines \
    --epochs $epochs --worker-timeout $T --metrics "$tmp/m.jsonl" ) >"$tmp/c.log" 2>&1 &
c=$!
pids="$c"
for k in 1 2 3 4; do
  ( rtf_ns_exec "$P-$k" "h$k" "$RAGTAG" worker --join "$join" --advertise "10.250.0.$((10 + k))" \
      --name "n$k" --threads 1 --connect-timeout 60 --join-file "$tmp/keys/join" ) >"$tmp/n$k.log" 2>&1 &
  pids="$pids $!"
  [ $k -eq 2 ] && n2=$!
done
# a watchdog: nothing may hang (the run itself takes ~30 s)
(
  trap 'kill $s 2>/dev/null; exit 0' TERM # the watchdog's sleep ends with it
  sleep 80 & s=$!
  wait $s
  kill -9 $pids 2>/dev/null
) &
dog=$!

i=0
while [ $i -lt 600 ] && ! grep -q "^epoch 1/" "$tmp/c.log"; do sleep 0.1; i=$((i + 1)); done
sleep 0.3
t_cut=$(now)
ip -n "$P-2" link set eth0 down
# the link stays down until the coordinator has dropped n2 (at most T + 3 s), and 1 s more
i=0
while [ $i -lt $(((T + 3) * 10)) ] && ! grep -q "lost rank .*(n2," "$tmp/c.log"; do sleep 0.1; i=$((i + 1)); done
detect=$(since "$t_cut")
sleep 1
ip -n "$P-2" link set eth0 up
t_up=$(now)
wait "$c"; s=$?
# every worker ends soon after the coordinator (n2 too, one way or the other)
left=""
for k in 1 2 3 4; do
  p=$(echo $pids | cut -d' ' -f$((k + 1)))
  gone_within "$p" 150 || left="$left n$k"
done
kill "$dog" 2>/dev/null
wait "$n2"; n2_status=$?

echo "--- coordinator (link of h2 down at +0, back at +$(awk -v a="$t_cut" -v b="$t_up" 'BEGIN { printf "%.1f", b - a }') s)"
grep -v "^ " "$tmp/c.log" | grep "members\|epoch 2/\|replicas\|done:\|error\|lost" | head -n 12
echo "--- n2"; tail -n 4 "$tmp/n2.log"

# the ring of generation 1 went over TCP between the hosts, no shared memory
rows=$(awk '/generation 1:/ { t = 1; next } t && /-> / { n++ } t && !/^ / { t = 0 } END { print n + 0 }' "$tmp/c.log")
tcp=$(awk '/generation 1:/ { t = 1; next } t && /tcp -> / { n++ } t && !/^ / { t = 0 } END { print n + 0 }' "$tmp/c.log")
[ "$rows" -eq 4 ] && [ "$tcp" -eq 4 ] && ok "4 hosts, the ring over TCP between them" ||
  bad "the ring of generation 1: $tcp of $rows links tcp (expected 4 of 4)"

[ $s -eq 0 ] && ok "the coordinator ended with status 0" || bad "the coordinator's status: $s"

if grep -q "lost rank [0-9] (n2, h2): nothing heard from it for [0-9]* s; 3 workers continue" "$tmp/c.log" &&
   awk -v d="$detect" -v t=$T 'BEGIN { exit !(d <= t + 3) }'; then
  ok "the cut-off worker n2 was dropped $detect s after the cut (--worker-timeout $T s)"
else bad "n2 not dropped within --worker-timeout $T + 3 s of the cut ($detect s)"; fi

# the run went on: the others took up the state and finished every epoch
if grep -q "3 workers go on from step [0-9]* (epoch [0-9]*)" "$tmp/c.log" &&
   grep -q "^epoch $epochs/$epochs:" "$tmp/c.log" && grep -q '"event": "lost"' "$tmp/m.jsonl"; then
  ok "3 workers went on to epoch $epochs ($(grep -o "[0-9]* steps* redone" "$tmp/c.log" | head -n 1 || echo "no step redone"))"
else bad "the run did not go on after the cut"; fi

bad_epochs=$(grep '"samples"' "$tmp/m.jsonl" | grep -vc "\"samples\": $ntrain[,}]")
[ "$(grep -c "\"samples\": $ntrain[,}]" "$tmp/m.jsonl")" -eq $epochs ] && [ "$bad_epochs" -eq 0 ] &&
  ok "every epoch used each of the $ntrain samples once" ||
  bad "samples not exact: $(grep -o '"samples": [0-9]*' "$tmp/m.jsonl" | tr '\n' ' ')"

rejoined=0
grep -q "admitted n2" "$tmp/c.log" && grep -q "joining .* again, as a new member" "$tmp/n2.log" && rejoined=1
world=$((3 + rejoined))
grep -q "replicas identical: parameter hash [0-9a-f]* on all $world workers" "$tmp/c.log" &&
  ok "replicas identical on all $world workers" || bad "replicas not reported identical on $world workers"

[ -z "$left" ] && ok "no worker left running after the run" || bad "still running after the run:$left"

if [ $rejoined -eq 1 ]; then
  ok "n2 found it was dropped and rejoined as a new member (admitted)"
else bad "n2 did not rejoin after its link came back (status $n2_status): $(tail -n 1 "$tmp/n2.log")"; fi

[ $fails -eq 0 ] && exit 0
echo "--- coordinator log"; cat "$tmp/c.log"
exit 1
