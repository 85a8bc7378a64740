#!/bin/sh
# Runs a command inside a fresh cgroup that allows it QUOTA cores of CPU
# time (the kernel's CFS bandwidth limit), with everything it starts:
#
#   bench/cpu-quota.sh [--period US] QUOTA -- CMD [ARG...]
#   e.g. bench/cpu-quota.sh 0.25 -- ragtag worker --join tcp://127.0.0.1:5555
#
# QUOTA is in cores (0.25: a quarter of one core; 1.5: one and a half).
# cgroup v1: a new group ragtag-bench-PID-N of the `cpu` controller with
# cpu.cfs_period_us PERIOD and cpu.cfs_quota_us QUOTA x PERIOD. cgroup v2
# (where v1's `cpu` controller is not mounted, or is not writable): a new
# child of the unified hierarchy's root with cpu.max "QUOTA x PERIOD PERIOD",
# after enabling +cpu in the root's cgroup.subtree_control. PERIOD is
# --period in microseconds, 1000 to 1000000, default 100000 (the kernel's
# and Kubernetes' default): CMD runs at full speed until it has used its
# quota of the period, then waits for the next period. With 100 ms that
# on/off rhythm is slower than a training step; a shorter period makes
# the slowdown smoother (and costs a little scheduling).
#
# This shell moves itself into the group and runs CMD as its child, so CMD
# and its children are inside; when CMD exits (or this shell gets TERM, HUP
# or INT: CMD gets TERM), it ends whatever CMD left running in the group,
# moves itself back and removes the group. Exit status: CMD's; 77 when no
# group can be made here (not root, a read-only /sys/fs/cgroup, no cpu
# controller): use ragtag's `--throttle F` (sleeping) instead; 2 for a bad
# command line.
set -eu
. "$(dirname "$0")/cgroup-run.sh"

me=cpu-quota.sh
usage() { echo "usage: $0 [--period US] QUOTA -- CMD [ARG...]   (QUOTA in cores, e.g. 0.25)" >&2; exit 2; }
period=100000
if [ "${1:-}" = --period ]; then
  [ $# -ge 2 ] || usage
  period=$2
  shift 2
  case $period in '' | *[!0-9]*) usage ;; esac
  if [ "$period" -lt 1000 ] || [ "$period" -gt 1000000 ]; then usage; fi
fi
[ $# -ge 2 ] || usage
quota=$1
shift
[ "$1" = -- ] && shift
[ $# -ge 1 ] || usage
case $quota in
  '' | *[!0-9.]* | *.*.* | .) usage ;;
esac
[ "$(awk -v q="$quota" 'BEGIN { print (q > 0) }')" = 1 ] || usage
# cores -> microseconds per period; the kernel's floor is 1000 us
us=$(awk -v q="$quota" -v p="$period" 'BEGIN { printf "%d", q * p + 0.5 }')
if [ "$us" -lt 1000 ]; then
  echo "$me: $quota x $period us is under the kernel's 1000 us minimum: use a longer --period" >&2
  exit 2
fi

unavailable() {
  echo "$me: cannot make a CPU-quota cgroup here ($1); needs root (or a delegated" \
       "cgroup) and a writable cgroup v1 'cpu' or v2 hierarchy with the cpu controller;" \
       "fall back to ragtag's --throttle F" >&2
  exit 77
}

dir='' home='' why=''
# A free name under $1: ragtag-bench-$$-N.
newdir() {
  n=0
  while [ -e "$1/ragtag-bench-$$-$n" ]; do n=$((n + 1)); done
  echo "$1/ragtag-bench-$$-$n"
}

# cgroup v1: the mount of the `cpu` controller (alone or as cpu,cpuacct).
v1=$(awk '$3 == "cgroup" && ("," $4 ",") ~ /,cpu,/ { print $2; exit }' /proc/mounts)
if [ -n "$v1" ]; then
  # where this shell is now, to come back to (the mount's root if unknown)
  rel=$(awk -F: '("," $2 ",") ~ /,cpu,/ { print $3; exit }' /proc/self/cgroup)
  home=$v1$rel
  [ -n "$rel" ] && [ -w "$home/cgroup.procs" ] || home=$v1
  d=$(newdir "$v1")
  if ! mkdir "$d" 2>/dev/null; then
    why="cannot create $d; "
  elif echo "$period" > "$d/cpu.cfs_period_us" 2>/dev/null && echo "$us" > "$d/cpu.cfs_quota_us" 2>/dev/null; then
    dir=$d
  else
    why="cannot write $d/cpu.cfs_quota_us; "
    rmdir "$d" 2>/dev/null || true
  fi
else
  why="no cgroup v1 'cpu' mount; "
fi
# cgroup v2: the unified hierarchy (/sys/fs/cgroup itself, or .../unified).
if [ -z "$dir" ]; then
  v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
  [ -n "$v2" ] || unavailable "${why}no cgroup v2 mount"
  grep -qw cpu "$v2/cgroup.controllers" 2>/dev/null ||
    unavailable "${why}the cgroup v2 hierarchy at $v2 has no cpu controller"
  rel=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)
  home=$v2$rel
  [ -n "$rel" ] && [ -w "$home/cgroup.procs" ] || home=$v2
  grep -qw cpu "$v2/cgroup.subtree_control" 2>/dev/null ||
    echo +cpu > "$v2/cgroup.subtree_control" 2>/dev/null ||
    unavailable "${why}cannot enable the cpu controller in $v2/cgroup.subtree_control"
  d=$(newdir "$v2")
  mkdir "$d" 2>/dev/null || unavailable "${why}cannot create $d"
  echo "$us $period" > "$d/cpu.max" 2>/dev/null || { rmdir "$d"; unavailable "${why}cannot write $d/cpu.max"; }
  dir=$d
fi

run_in_group "$@"
