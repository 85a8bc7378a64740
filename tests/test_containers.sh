#!/bin/sh
# test_containers.sh — the container path with a real engine (make
# check-containers, root only): the Dockerfile builds; the Compose cluster
# (docker-compose.yml, unchanged) trains lenet on Fashion-MNIST with three
# CPU-limited workers to the accuracy of a one-process run of the same
# recipe, with identical replicas, the CPU limits in the coordinator's
# cluster table and the smallest share (or standby) for the 0.25-CPU
# worker; mid-run one worker is killed (docker kill), another paused
# (docker pause) and a worker from "another machine" (docker run on the
# host network, the README's third command) joins: the run survives and
# its checkpoint is whole. Then the pods of deploy/k8s/*.yaml run in
# Docker (tests/k8s-run.py) for a short real run.
#
# No registry is reachable: the base image debian:12 is made with
# debootstrap from the mirror apt uses (unless it exists). dockerd is used
# when one answers, else started here (own data root, stopped by PID at the
# end). Everything started here is removed at the end, also on failure:
# containers, networks, volumes, images, and for a dockerd started here its
# docker0, iptables chains and ip_forward setting.
# KEEP_IMAGES=1 keeps the built image (and a made debian:12) for a rerun.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
src=$(cd "$top_srcdir" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (it starts dockerd and runs debootstrap)"
for c in dockerd docker-compose debootstrap python3 ip iptables; do
  command -v "$c" >/dev/null 2>&1 ||
    skip "no $c: apt-get install docker.io docker-compose debootstrap python3-yaml iproute2 iptables"
done
python3 -c 'import yaml' 2>/dev/null || skip "no python3-yaml (apt-get install python3-yaml)"
# Debian's docker client, when another one comes first on the PATH; the
# classic builder (Debian's docker has no BuildKit)
[ -x /usr/bin/docker ] && PATH=/usr/bin:$PATH
export PATH DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
command -v docker >/dev/null 2>&1 || skip "no docker client (apt-get install docker.io)"

tmp=$(mktemp -d /tmp/ragtag-ct.XXXXXX)
proj=ragtagct$$
img=ragtag-check:$$
# below Linux's ephemeral range (32768-60999), where an outgoing connection
# may take a port at any moment; docker-proxy publishes port..port+3 on the host
port=17555
dockerd_pid= made_base= fwd_before= policy_before= had_chains= had_docker0=
fail=0
T0=$(date +%s)
say() { echo "# [$(($(date +%s) - T0)) s] $*"; }
ok() { echo "ok - $*"; }
bad() { echo "not ok - $*"; fail=1; }
die() { echo "not ok - $*"; exit 1; }

cleanup() {
  set +e
  trap - EXIT INT TERM HUP
  say "cleaning up"
  if docker info >/dev/null 2>&1; then
    docker-compose -p "$proj" -f "$src/docker-compose.yml" down -v --remove-orphans >/dev/null 2>&1
    ids=$(docker ps -aq --filter "name=$proj")
    [ -n "$ids" ] && docker rm -f $ids >/dev/null 2>&1
    docker network rm "${proj}k8s-net" >/dev/null 2>&1
    if [ -z "${KEEP_IMAGES:-}" ]; then
      docker rmi -f "$img" "$img-build" >/dev/null 2>&1
      [ -n "$made_base" ] && docker rmi -f debian:12 >/dev/null 2>&1
    fi
  fi
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null
    i=0; while kill -0 "$dockerd_pid" 2>/dev/null && [ $i -lt 30 ]; do sleep 1; i=$((i + 1)); done
    kill -9 "$dockerd_pid" 2>/dev/null
    [ -z "$had_docker0" ] && ip link del docker0 2>/dev/null
    [ -z "$had_chains" ] && iptables_undo
    [ -n "$policy_before" ] && iptables -P FORWARD "$policy_before"
    [ -n "$fwd_before" ] && sysctl -qw net.ipv4.ip_forward="$fwd_before"
    grep -q " $tmp/" /proc/mounts && awk -v t="$tmp/" 'index($2, t) == 1 { print $2 }' /proc/mounts |
      sort -r | while read -r m; do umount -l "$m"; done
  fi
  rm -rf "$tmp"
  say "done"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# The rules and chains a dockerd started here added (none existed before).
iptables_undo() {
  for t in filter nat; do
    iptables -t "$t" -S | grep -E '^-A (INPUT|FORWARD|OUTPUT|PREROUTING|POSTROUTING) ' |
      grep -E 'DOCKER|docker0' | sed 's/^-A/-D/' | while read -r rule; do
        eval "iptables -t $t $rule"
      done
    for ch in $(iptables -t "$t" -S | awk '$1 == "-N" && $2 ~ /^DOCKER/ { print $2 }'); do
      iptables -t "$t" -F "$ch"
    done
    for ch in $(iptables -t "$t" -S | awk '$1 == "-N" && $2 ~ /^DOCKER/ { print $2 }'); do
      iptables -t "$t" -X "$ch"
    done
  done
}

# ---- the engine -------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  fwd_before=$(sysctl -n net.ipv4.ip_forward)
  policy_before=$(iptables -S FORWARD | awk '$1 == "-P" { print $3; exit }')
  iptables-save 2>/dev/null | grep -q DOCKER && had_chains=1
  ip link show docker0 >/dev/null 2>&1 && had_docker0=1
  dockerd --data-root "$tmp/docker" --exec-root "$tmp/docker-run" --pidfile "$tmp/dockerd.pid" \
    >"$tmp/dockerd.log" 2>&1 &
  dockerd_pid=$!
  i=0
  until docker info >/dev/null 2>&1; do
    kill -0 "$dockerd_pid" 2>/dev/null || { tail -5 "$tmp/dockerd.log"; skip "dockerd does not start here (log above)"; }
    i=$((i + 1)); [ $i -lt 60 ] || skip "dockerd did not answer within 60 s"
    sleep 1
  done
  say "started dockerd (pid $dockerd_pid)"
fi
grep -qw cpu /proc/self/cgroup 2>/dev/null || [ -e /sys/fs/cgroup/cpu.max ] ||
  [ -e /sys/fs/cgroup/cgroup.controllers ] || skip "no cpu cgroup controller: --cpus cannot work"

# ---- the base image: debootstrap from apt's mirror ---------------------------------
if ! docker image inspect debian:12 >/dev/null 2>&1; then
  mirror=$(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\(https\{0,1\}:[^ ]*\) .*/\2/p' \
    /etc/apt/sources.list 2>/dev/null | head -n 1)
  [ -n "$mirror" ] || mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  say "debootstrap bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
    { tail -5 "$tmp/debootstrap.log"; die "debootstrap failed"; }
  echo "deb $mirror bookworm main" >"$tmp/rootfs/etc/apt/sources.list"
  rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
  tar -C "$tmp/rootfs" -c . | docker import - debian:12 >/dev/null || die "docker import failed"
  made_base=1
  rm -rf "$tmp/rootfs"
  say "base image debian:12 made"
fi

# ---- the image -------------------------------------------------------------------
b0=$(date +%s)
# the build stage tagged too, so that the cleanup removes it with the image
docker build --target build -t "$img-build" "$src" >"$tmp/build.log" 2>&1 &&
  docker build -t "$img" "$src" >>"$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log"; die "docker build failed"; }
build_s=$(($(date +%s) - b0))
size_mb=$(($(docker image inspect -f '{{.Size}}' "$img") / 1000000))
ok "docker build: ${build_s} s, runtime image ${size_mb} MB"
docker run --rm "$img" devices >"$tmp/devices" 2>&1
grep -q '^opencl   0 ' "$tmp/devices" && grep -q '^cpu      0 ' "$tmp/devices" &&
  ok "the image computes on cpu and opencl (PoCL)" ||
  { cat "$tmp/devices"; bad "ragtag devices in the image lacks cpu or opencl"; }
uid=$(docker run --rm --entrypoint id "$img" -u)
[ "$uid" = 10001 ] && ok "the image runs as a non-root user (uid $uid)" || bad "the image runs as uid $uid"

# ---- the recipe, and one process running it -----------------------------------------
E=8 B=2048 L=20000
lenet=/usr/local/share/ragtag/examples/lenet.cfg
docker run --rm "$img" train "$lenet" --epochs $E --batch $B --limit $L --threads 2 \
  --progress off >"$tmp/one.log" 2>&1 || { tail "$tmp/one.log"; die "the one-process run failed"; }
ref=$(sed -n 's/.*done:.*test_acc \([0-9.]*\)%.*/\1/p' "$tmp/one.log")
say "one process: test_acc $ref%"

# ---- the Compose cluster --------------------------------------------------------------
hostip=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1) }')
[ -n "$hostip" ] || hostip=$(hostname -I | awk '{ print $1 }')
export RAGTAG_IMAGE="$img" RAGTAG_PORT=$port RAGTAG_W1_PORT=$((port + 1)) \
  RAGTAG_W2_PORT=$((port + 2)) RAGTAG_W3_PORT=$((port + 3)) RAGTAG_EPOCHS=$E RAGTAG_BATCH=$B \
  RAGTAG_LIMIT=$L RAGTAG_WORKER_TIMEOUT=10 RAGTAG_ADVERTISE="$hostip"
dc() { docker-compose -p "$proj" -f "$src/docker-compose.yml" "$@"; }
# the coordinator's log (docker's client: docker-compose starts slowly)
clog() { docker logs "$cid" 2>&1; }
# wait_log PATTERN SECONDS: until the coordinator's log shows PATTERN
wait_log() {
  end=$(($(date +%s) + $2))
  until clog | grep -q -- "$1"; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.5
  done
}
u0=$(date +%s.%N)
dc up -d >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; die "docker-compose up failed"; }
cid=$(dc ps -q coord)
wait_log '\[plan\] step 0 ' 180 || { clog | tail -30; die "no first step within 180 s of docker-compose up"; }
first_s=$(echo "$u0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')
ok "docker-compose up to the first step: $first_s s"

# the first cluster table (the device name has spaces): name, cpus, share
# (from the end: ring is 3 words)
# the cpus column: the one cell of the form N.NN (threads, img/s and
# share are integers)
clog | awk '/cluster of 3 workers/ { t = 1; next } t && $2 ~ /^w[123]$/ {
  c = "-"; for (i = 3; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9][0-9]$/) { c = $i; break }
  print $2, c, $(NF - 3) } t && !/^ / { exit }' >"$tmp/table"
sed 's/^/#   name cpus first-share: /' "$tmp/table"
[ "$(awk '{ printf "%s=%s ", $1, $2 }' "$tmp/table")" = "w1=1.00 w2=0.50 w3=0.25 " ] &&
  ok "the cluster table shows the CPU limits 1.00, 0.50, 0.25" ||
  bad "the cluster table does not show the CPU limits (see above)"

# ---- faults mid-run: kill one, pause another, one joins from "another machine" -----
wait_log '^epoch 1/' 120 || die "no epoch ended"
clog >"$tmp/before.log"
# The plan by then, from speeds measured over the first steps (the first
# plan's, measured at join, are noisy on a busy machine): generation 1
# ranks w1 w2 w3 by name; the 0.25-CPU worker has the smallest share of the
# last plan of the three, or left the ring on standby before w2 did.
grep '\[plan\] step .*shares of batch [0-9]* by rank: [0-9]* [0-9]* [0-9]* at' "$tmp/before.log" |
  sed 's/^/#   /'
last=$(sed -n 's/.*\[plan\] step .*shares of batch [0-9]* by rank: \([0-9]* [0-9]* [0-9]*\) at.*/\1/p' \
  "$tmp/before.log" | tail -n 1)
sb=$(sed -n 's/.*left the ring: on standby.*/&/p' "$tmp/before.log" | grep -o '(w[23],' | head -n 1)
echo "$last" | awk -v sb="$sb" '{ exit !(($3 < $1 && $3 < $2) || sb == "(w3,") }' &&
  ok "the plan gives the 0.25-CPU worker the smallest share (last plan of three: $last${sb:+; first on standby: $sb})" ||
  bad "the 0.25-CPU worker's share is not the smallest (last plan of three: $last${sb:+; first on standby: $sb})"
# the members now (the last cluster table), w1 aside: it keeps the run going
members=$(awk '/cluster of [0-9]+ workers?,/ { n = 0; t = 1; next }
  t && $1 == "rank" { next } t && $1 ~ /^[0-9]+$/ && $2 ~ /^w[0-9]$/ { m[++n] = $2; next }
  t { t = 0 }
  END { for (i = 1; i <= n; i++) if (m[i] != "w1") print m[i] }' "$tmp/before.log")
say "members other than w1: $(echo $members)"
case $(echo $members) in
  "w2 w3") kill=w2 pause=w3 ;;
  w2) kill=w3 pause=w2 ;;
  w3) kill=w2 pause=w3 ;;
  *) kill=w2 pause=w3 ;;
esac
member() { case " $(echo $members) " in *" $1 "*) return 0 ;; esac; return 1; }
docker kill "${proj}_${kill}_1" >/dev/null && say "docker kill $kill ($(member $kill && echo member || echo 'on standby'))"
docker pause "${proj}_${pause}_1" >/dev/null && say "docker pause $pause ($(member $pause && echo member || echo 'on standby'))"
# README: the join string from the coordinator, in the environment
RAGTAG_JOIN=$(docker exec "$cid" cat /join/join) docker run -d --name "$proj-w4" --network host \
  --cpus 1 -e RAGTAG_JOIN "$img" worker --join "tcp://$hostip:$port" --name w4 --threads 1 \
  >/dev/null && say "docker run ... worker --join tcp://$hostip:$port (w4, host network)"
if member $pause; then
  # dropped as silent, unless the plan sent it to standby just before the
  # pause (then it was no member any more: said, not failed)
  sb0=$(grep -c "($pause, .*left the ring: on standby" "$tmp/before.log")
  end=$(($(date +%s) + 60))
  until clog | grep -q "lost rank .*($pause, "; do
    if [ "$(clog | grep -c "($pause, .*left the ring: on standby")" -gt "$sb0" ]; then
      say "$pause left the ring on standby as it was paused: no member to drop"
      members=$(echo $members | sed "s/$pause//"); break
    fi
    [ "$(date +%s)" -lt "$end" ] || { bad "the paused member $pause was not dropped within 60 s"; break; }
    sleep 0.5
  done
else
  sleep 12
fi
docker unpause "${proj}_${pause}_1" >/dev/null && say "docker unpause $pause"
rc=$(timeout 300 docker wait "$cid") || rc=timeout
clog >"$tmp/coord.log"
end_s=$(($(date +%s) - T0))
grep -E '\[members\]|epoch [0-9]+/|replicas|done:' "$tmp/coord.log" | sed 's/^/#   /'
[ "$rc" = 0 ] && ok "the coordinator exited 0: the run survived" || bad "the coordinator exited $rc"
lost=0
if member $kill; then
  lost=$((lost + 1))
  grep -q "lost rank .*($kill, .*its connection closed" "$tmp/coord.log" &&
    ok "the killed member $kill was lost at once (its connection closed)" || bad "no loss of $kill logged"
fi
if member $pause; then
  lost=$((lost + 1))
  grep -q "lost rank .*($pause, .*nothing heard from it" "$tmp/coord.log" &&
    ok "the paused member $pause was dropped after --worker-timeout" || bad "no loss of $pause logged"
fi
[ $lost -gt 0 ] || say "w2 and w3 were both on standby: the kill and the pause hit no member"
grep -q 'admitted w4' "$tmp/coord.log" &&
  ok "the worker from the host network joined the run under way" || bad "w4 was not admitted"
grep -q 'replicas identical: parameter hash' "$tmp/coord.log" &&
  ok "$(grep -o 'replicas identical.*' "$tmp/coord.log")" || bad "no identical replicas"
acc=$(sed -n 's/.*done:.*test_acc \([0-9.]*\)%.*/\1/p' "$tmp/coord.log")
awk -v a="${acc:-0}" -v r="${ref:-100}" 'BEGIN { d = a - r; exit !(d < 1 && d > -1) }' &&
  ok "test accuracy $acc% (one process: $ref%)" || bad "test accuracy $acc%, one process $ref%"
docker run --rm -v "${proj}_out:/out" "$img" eval "$lenet" --weights /out/run/last.safetensors \
  >"$tmp/eval.log" 2>&1
ev=$(sed -n 's/.*accuracy \([0-9.]*\)%.*/\1/p' "$tmp/eval.log")
awk -v a="${acc:-0}" -v e="${ev:-0}" 'BEGIN { d = a - e; exit !(d < 1 && d > -1) }' &&
  ok "the checkpoint in the volume is whole: eval gives $ev%" ||
  { cat "$tmp/eval.log"; bad "the checkpoint does not evaluate to the run's accuracy"; }
docker run --rm -v "${proj}_out:/out" --entrypoint grep "$img" -c '"event": "lost"' \
  /out/run/metrics.jsonl >"$tmp/events" 2>&1
[ "$(cat "$tmp/events")" -ge $lost ] 2>/dev/null && ok "the metrics file records the $lost losses" ||
  bad "the metrics file lacks the lost events"
for w in w1 $pause; do say "$w exited $(docker inspect -f '{{.State.ExitCode}}' "${proj}_${w}_1")"; done
say "w4 exited $(docker inspect -f '{{.State.ExitCode}}' "$proj-w4")"
dc down -v >/dev/null 2>&1
docker rm -f "$proj-w4" >/dev/null 2>&1

# ---- the Kubernetes manifests, their pods played in Docker --------------------------
k0=$(date +%s)
docker run --rm --user 0 -v "$tmp:/t" "$img" keygen /t/k8skeys >/dev/null ||
  die "keygen in the image failed"
TMPDIR=$tmp python3 "$src/tests/k8s-run.py" "$img" "$tmp/k8skeys" "${proj}k8s" "$src"/deploy/k8s/*.yaml \
  -- --epochs 1 --limit 3000 >"$tmp/k8s.log" 2>&1
k8s_rc=$?
sed 's/^/#   /' "$tmp/k8s.log" | grep -v '^#   ragtag: \[' | tail -20
[ $k8s_rc = 0 ] && ok "deploy/k8s: the coordinator Job, the Indexed Job's 3 workers and the GPU variant's command line ($(($(date +%s) - k0)) s)" ||
  bad "deploy/k8s pods failed"
ids=$(docker ps -aq --filter "name=${proj}k8s")
[ -n "$ids" ] && docker rm -f $ids >/dev/null
docker network rm "${proj}k8s-net" >/dev/null 2>&1

echo "# figures: image build ${build_s} s, runtime image ${size_mb} MB, docker-compose up to first step ${first_s} s, one process ${ref}%, cluster with faults ${acc}%, test ${end_s} s to the end of the Compose run, $(($(date +%s) - T0)) s in all"
exit $fail
