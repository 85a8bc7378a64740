#!/bin/sh
# Runs a command inside a fresh cgroup whose memory is limited to MB
# megabytes (what `docker run --memory MBm` gives a container), with
# everything it starts:
#
#   bench/mem-limit.sh MB -- CMD [ARG...]
#   e.g. bench/mem-limit.sh 256 -- ragtag worker --join tcp://127.0.0.1:5555
#
# cgroup v1: a new group ragtag-mem-PID-N of the `memory` controller with
# memory.limit_in_bytes MB x 2^20 (and memory.memsw.limit_in_bytes the
# same where swap is accounted, so the limit is not dodged by swapping).
# cgroup v2 (where v1's `memory` controller is not mounted): a new child of
# the unified hierarchy's root with memory.max (and memory.swap.max 0),
# after enabling +memory in the root's cgroup.subtree_control. A process
# that goes past the limit is killed by the kernel's OOM killer, as in a
# container: its exit status is then 137.
#
# Like bench/cpu-quota.sh (which this mirrors), this shell moves itself
# into the group and runs CMD as its child; when CMD exits (or this shell
# gets TERM, HUP or INT: CMD gets TERM) it ends whatever CMD left in the
# group, moves itself back and removes the group. Exit status: CMD's; 77
# when no group can be made here (not root, a read-only /sys/fs/cgroup,
# no memory controller); 2 for a bad command line.
set -eu
. "$(dirname "$0")/cgroup-run.sh"

me=mem-limit.sh
usage() { echo "usage: $0 MB -- CMD [ARG...]   (MB: the memory limit in MiB, e.g. 256)" >&2; exit 2; }
[ $# -ge 2 ] || usage
mb=$1
shift
[ "$1" = -- ] && shift
[ $# -ge 1 ] || usage
case $mb in '' | *[!0-9]*) usage ;; esac
[ "$mb" -ge 4 ] || usage
bytes=$((mb * 1048576))

unavailable() {
  echo "$me: cannot make a memory-limited cgroup here ($1); needs root (or a delegated" \
       "cgroup) and a writable cgroup v1 'memory' or v2 hierarchy with the memory controller" >&2
  exit 77
}

dir='' home='' why=''
newdir() {
  n=0
  while [ -e "$1/ragtag-mem-$$-$n" ]; do n=$((n + 1)); done
  echo "$1/ragtag-mem-$$-$n"
}

# cgroup v1: the mount of the `memory` controller.
v1=$(awk '$3 == "cgroup" && ("," $4 ",") ~ /,memory,/ { print $2; exit }' /proc/mounts)
if [ -n "$v1" ]; then
  rel=$(awk -F: '("," $2 ",") ~ /,memory,/ { print $3; exit }' /proc/self/cgroup)
  home=$v1$rel
  [ -n "$rel" ] && [ -w "$home/cgroup.procs" ] || home=$v1
  d=$(newdir "$v1")
  if ! mkdir "$d" 2>/dev/null; then
    why="cannot create $d; "
  elif echo "$bytes" > "$d/memory.limit_in_bytes" 2>/dev/null; then
    [ ! -e "$d/memory.memsw.limit_in_bytes" ] || echo "$bytes" > "$d/memory.memsw.limit_in_bytes" 2>/dev/null || true
    dir=$d
  else
    why="cannot write $d/memory.limit_in_bytes; "
    rmdir "$d" 2>/dev/null || true
  fi
else
  why="no cgroup v1 'memory' mount; "
fi
# cgroup v2: the unified hierarchy.
if [ -z "$dir" ]; then
  v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
  [ -n "$v2" ] || unavailable "${why}no cgroup v2 mount"
  grep -qw memory "$v2/cgroup.controllers" 2>/dev/null ||
    unavailable "${why}the cgroup v2 hierarchy at $v2 has no memory controller"
  rel=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)
  home=$v2$rel
  [ -n "$rel" ] && [ -w "$home/cgroup.procs" ] || home=$v2
  grep -qw memory "$v2/cgroup.subtree_control" 2>/dev/null ||
    echo +memory > "$v2/cgroup.subtree_control" 2>/dev/null ||
    unavailable "${why}cannot enable the memory controller in $v2/cgroup.subtree_control"
  d=$(newdir "$v2")
  mkdir "$d" 2>/dev/null || unavailable "${why}cannot create $d"
  echo "$bytes" > "$d/memory.max" 2>/dev/null || { rmdir "$d"; unavailable "${why}cannot write $d/memory.max"; }
  [ ! -e "$d/memory.swap.max" ] || echo 0 > "$d/memory.swap.max" 2>/dev/null || true
  dir=$d
fi

run_in_group "$@"
