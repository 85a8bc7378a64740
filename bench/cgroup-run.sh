# cgroup-run.sh — sourced by bench/cpu-quota.sh and bench/mem-limit.sh:
# what both do once their group $dir is made. run_in_group runs CMD ("$@")
# in it: this shell moves there (and back to $home at the end), a TERM,
# HUP or INT goes to CMD, whatever CMD left behind is ended, the group is
# removed, and it exits with CMD's status. Uses the sourcing script's $me
# and unavailable().

run_in_group() {
  child=''
  cleanup() {
    trap - EXIT
    # back to where this shell came from, then whatever CMD left behind
    echo $$ > "$home/cgroup.procs" 2>/dev/null || true
    left=$(cat "$dir/cgroup.procs" 2>/dev/null || true)
    if [ -n "$left" ]; then
      # shellcheck disable=SC2086 # one pid a word
      kill -TERM $left 2>/dev/null || true
      i=0
      while [ -n "$(cat "$dir/cgroup.procs" 2>/dev/null || true)" ] && [ $i -lt 20 ]; do
        sleep 0.1
        i=$((i + 1))
      done
      left=$(cat "$dir/cgroup.procs" 2>/dev/null || true)
      # shellcheck disable=SC2086
      [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
    fi
    i=0
    until rmdir "$dir" 2>/dev/null; do
      i=$((i + 1))
      [ $i -lt 50 ] || { echo "$me: could not remove $dir" >&2; break; }
      sleep 0.1
    done
  }
  trap cleanup EXIT
  # A signal to this shell goes to CMD; the wait below then returns and the
  # group is removed. (A shell started in the background by another
  # non-interactive shell ignores INT for good: send it TERM.)
  trap '[ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true' TERM HUP INT

  echo $$ > "$dir/cgroup.procs" 2>/dev/null || unavailable "cannot move a process into $dir"
  "$@" &
  child=$!
  # wait again when a trapped signal interrupted the wait (status > 128 with
  # the child still there); a second wait on a reaped child would say 127
  while :; do
    rc=0
    wait "$child" || rc=$?
    [ $rc -gt 128 ] && kill -0 "$child" 2>/dev/null && continue
    break
  done
  cleanup
  exit "$rc"
}
