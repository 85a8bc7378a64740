#!/bin/sh
# test_slurm.sh — deploy/slurm/ragtag.sbatch under a real Slurm (make
# check-containers, root only): a one-machine cluster (munged, slurmctld and
# slurmd of Debian's slurm-wlm, on their own socket, ports 17600-17601
# (below Linux's ephemeral range) and files in a temporary directory)
# runs the script with 3 tasks; the job must end 0 with the 3 workers'
# replicas identical. Skips, saying why, where Slurm cannot be brought
# up. Everything started here is stopped by its PID at the end, also on
# failure.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
src=$(cd "$top_srcdir" && pwd)
RAGTAG=${RAGTAG:-$top_builddir/src/ragtag}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (it starts munged, slurmctld and slurmd)"
for c in munged slurmctld slurmd sbatch sinfo; do
  command -v "$c" >/dev/null 2>&1 || skip "no $c: apt-get install slurm-wlm munge"
done
"$RAGTAG" coord --help 2>&1 | grep -q -- '--serve-data' || skip "ragtag built without ZeroMQ: no coord"

tmp=$(mktemp -d /tmp/ragtag-slurm.XXXXXX)
chmod 755 "$tmp"
pids=
cleanup() {
  set +e
  for p in $pids; do kill "$p" 2>/dev/null; done
  for p in $pids; do
    i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt 20 ]; do sleep 0.5; i=$((i + 1)); done
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "not ok - $*"; for f in "$tmp"/*.log; do echo "## $f"; tail -15 "$f"; done; exit 1; }

# munge: its own key, socket and files
mkdir -p "$tmp/munge"
chmod 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$tmp/munge/munge.key"
munged --foreground --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.sock" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munged.log" \
  --seed-file="$tmp/munge/munge.seed" >"$tmp/munged.out" 2>&1 &
pids="$pids $!"
i=0
until [ -S "$tmp/munge/munge.sock" ]; do
  kill -0 $! 2>/dev/null || { cat "$tmp/munged.out"; skip "munged does not start here (above)"; }
  i=$((i + 1)); [ $i -lt 40 ] || skip "munged made no socket within 20 s"
  sleep 0.5
done

node=$(hostname -s)
cpus=4  # 3 tasks of 1 CPU and room to spare; config_overrides lets a smaller machine take it
mkdir -p "$tmp/state" "$tmp/spool"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=ragtagtest
SlurmctldHost=$node
SlurmctldPort=17600
SlurmdPort=17601
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=$node CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$tmp/slurm.conf"
slurmctld -D -i >"$tmp/slurmctld.out" 2>&1 &
pids="$pids $!"
slurmd -D >"$tmp/slurmd.out" 2>&1 &
pids="$pids $!"
i=0
until sinfo -h -o '%t' 2>/dev/null | grep -q '^idle'; do
  for p in $pids; do kill -0 "$p" 2>/dev/null ||
    { tail -5 "$tmp"/*.out "$tmp"/*.log 2>/dev/null; skip "a Slurm daemon exited at start (logs above)"; }; done
  i=$((i + 1)); [ $i -lt 60 ] || { sinfo 2>&1 | tail -3; tail -5 "$tmp"/*.log; skip "the Slurm node is not idle within 30 s"; }
  sleep 0.5
done
echo "# Slurm up: $(sinfo -h -o '%P %D %t %c' | head -n 1)"

# the script, as a user submits it; ragtag from the build tree
t0=$(date +%s)
mkdir -p "$tmp/run"
(cd "$tmp/run" && PATH="$(dirname "$RAGTAG"):$PATH" RAGTAG_MODEL="$src/examples/lenet.cfg" \
  RAGTAG_PORT=49602 sbatch --wait --ntasks=3 --cpus-per-task=1 --time=10 \
  "$src/deploy/slurm/ragtag.sbatch" --epochs 1 --limit 3000 >"$tmp/sbatch.log" 2>&1)
rc=$?
out=$(ls "$tmp/run"/ragtag-*.out 2>/dev/null | head -n 1)
[ -n "$out" ] && cp "$out" "$tmp/job.log"
grep -E 'joined from|replicas|done:|error|refused' "$tmp/job.log" 2>/dev/null | sed 's/^/#   /'
[ $rc = 0 ] || fail "the batch job failed (sbatch --wait: $rc)"
grep -q 'replicas identical: parameter hash .* on all 3 workers' "$tmp/job.log" ||
  fail "the job's 3 workers did not end with identical replicas"
[ -s "$tmp/run/ragtag-$(sed -n 's/^Submitted batch job //p' "$tmp/sbatch.log")/last.safetensors" ] ||
  fail "no checkpoint in ./ragtag-JOBID"
echo "ok - deploy/slurm/ragtag.sbatch under Slurm: coordinator and 3 srun workers, replicas identical ($(($(date +%s) - t0)) s)"
