# netns-lib.sh — hosts in network namespaces for tests/test_netns.sh and
# bench/bench_faults.sh (sourced, POSIX sh; needs root and iproute2).
#
# rtf_ns_usable            0 when namespaces can be made here, else prints why (for a skip)
# rtf_ns_up P N            a switch P-sw (bridge br0), the coordinator's host P-c at
#                          10.250.0.1 and worker hosts P-1..P-N at 10.250.0.11.., each
#                          joined to the bridge by a veth pair: eth0 in the host, pc /
#                          p1..pN on the bridge; `ip -n P-K link set eth0 down` cuts host K
# rtf_ns_down P N          removes them (a namespace's devices go with it)
# rtf_ns_exec NS HOST CMD  runs CMD (exec, so $! is CMD's pid) in NS as host HOST: its own
#                          UTS name and its own /dev/shm. ragtag keys "same host" on the
#                          boot id and the device/inode of /dev/shm (net/transport.c
#                          rt_net_host_id), so workers in different namespaces then talk
#                          TCP between them, as on different machines, not shared memory.

rtf_ns_usable() {
  if [ "$(id -u)" -ne 0 ]; then echo "not root: network namespaces need root"; return 1; fi
  for t in ip unshare; do
    command -v $t >/dev/null 2>&1 || { echo "no $t command"; return 1; }
  done
  probe=rtf-probe-$$
  if ! ip netns add "$probe" 2>/dev/null; then echo "'ip netns add' fails here (no CAP_SYS_ADMIN, or no netns support)"; return 1; fi
  ok=0
  ip -n "$probe" link add br0 type bridge 2>/dev/null || ok=1
  unshare --mount --uts sh -c 'mount -t tmpfs rtf /dev/shm && hostname rtfprobe' 2>/dev/null || ok=2
  ip netns del "$probe"
  case $ok in
    1) echo "cannot make a bridge in a network namespace (no bridge module?)"; return 1 ;;
    2) echo "cannot make a private /dev/shm and host name (unshare --mount --uts)"; return 1 ;;
  esac
  return 0
}

rtf_ns_up() { # prefix workers
  ip netns add "$1-sw" || return 1
  ip -n "$1-sw" link add br0 type bridge && ip -n "$1-sw" link set br0 up || return 1
  rtf_i=0
  for rtf_h in c $(seq 1 "$2"); do
    rtf_ip=10.250.0.$([ "$rtf_h" = c ] && echo 1 || echo $((10 + rtf_h)))
    ip netns add "$1-$rtf_h" &&
      ip -n "$1-sw" link add "p$rtf_h" type veth peer name eth0 netns "$1-$rtf_h" &&
      ip -n "$1-sw" link set "p$rtf_h" master br0 up &&
      ip -n "$1-$rtf_h" addr add "$rtf_ip/24" dev eth0 &&
      ip -n "$1-$rtf_h" link set eth0 up && ip -n "$1-$rtf_h" link set lo up || return 1
  done
}

rtf_ns_down() { # prefix workers
  for rtf_h in c $(seq 1 "$2") sw; do ip netns del "$1-$rtf_h" 2>/dev/null; done
  return 0
}

rtf_ns_exec() { # namespace hostname command...
  rtf_ns=$1 rtf_host=$2
  shift 2
  exec ip netns exec "$rtf_ns" unshare --mount --uts sh -c \
    'mount -t tmpfs -o size=64m rtf /dev/shm && hostname "$0" && exec "$@"' "$rtf_host" "$@"
}
