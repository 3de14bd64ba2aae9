#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# rdmagw node mode, init step: prepares the host for one rdmagw serving every
# pod on it (docs/deploy.md, "Node mode").  Runs in the DaemonSet's pod, on
# the host's network (hostNetwork: true), as root with CAP_NET_ADMIN and
# CAP_CHOWN only, before the rdmagw container starts.
#
#   node-init.sh [install]   make the socket directory and the node-local address
#   node-init.sh cleanup     remove the node-local address (and its interface,
#                            if node-init.sh made one)
#
# Environment:
#   RDMAGW_SOCKET_DIR     the host directory (hostPath) holding rdmagw's unix
#                         listeners, made and given to RDMAGW_UID (default
#                         /run/rdmagw); empty: none
#   RDMAGW_UID            the uid rdmagw runs as (default 1337)
#   RDMAGW_NODE_ADDRESS   the node-local address pods reach rdmagw's TCP
#                         listeners on, with its prefix (default 169.254.77.1/32):
#                         link-local, the same on every node, so manifests
#                         need no per-node value, and never routed off the node;
#                         empty: none
#   RDMAGW_NODE_LINK      the interface carrying it (default lo, the host's
#                         loopback, which every kernel has); another name is a
#                         dummy interface made for it (needs the kernel's
#                         dummy driver, as NodeLocal DNSCache does)
#
# Running it again changes nothing that is already right.  Exit status: 0
# done; 1 a step failed (the line before says which); 2 bad settings.
set -eu

PROG=rdmagw-node-init
log() { printf '%s: %s\n' "$PROG" "$*"; }
die() {
  status=$1
  shift
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit "$status"
}

SOCKET_DIR=${RDMAGW_SOCKET_DIR-/run/rdmagw}
UID_=${RDMAGW_UID:-1337}
ADDRESS=${RDMAGW_NODE_ADDRESS-169.254.77.1/32}
LINK=${RDMAGW_NODE_LINK:-lo}

case $UID_ in '' | *[!0-9]*) die 2 "RDMAGW_UID must be a number, got '$UID_'" ;; esac
case $SOCKET_DIR in '' | /*) ;; *) die 2 "RDMAGW_SOCKET_DIR must be an absolute path, got '$SOCKET_DIR'" ;; esac
case $ADDRESS in '' | */*) ;; *) die 2 "RDMAGW_NODE_ADDRESS needs a prefix length, e.g. 169.254.77.1/32, got '$ADDRESS'" ;; esac
[ "${#LINK}" -le 15 ] || die 2 "RDMAGW_NODE_LINK '$LINK' is longer than an interface name may be (15)"

action=${1:-install}
case $action in
  install | cleanup) ;;
  -h | --help)
    sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
    ;;
  *) die 2 "unknown command '$action' (use: node-init.sh [install|cleanup])" ;;
esac

if [ -n "$ADDRESS" ] && ! command -v ip >/dev/null 2>&1; then
  die 1 "ip (iproute2) not found"
fi

if [ "$action" = cleanup ]; then
  [ -n "$ADDRESS" ] || exit 0
  if [ "$LINK" = lo ]; then
    if ip -o addr show dev lo | grep -q " ${ADDRESS%/*}/"; then
      ip addr delete "$ADDRESS" dev lo || die 1 "ip addr delete $ADDRESS dev lo failed (CAP_NET_ADMIN?)"
      log "removed $ADDRESS from lo"
    fi
  elif ip link show "$LINK" >/dev/null 2>&1; then
    ip link delete "$LINK" || die 1 "ip link delete $LINK failed (CAP_NET_ADMIN in the host's network namespace?)"
    log "removed $LINK"
  fi
  exit 0
fi

if [ -n "$SOCKET_DIR" ]; then
  # rdmagw (uid $UID_) creates its sockets here; every pod mounting the
  # directory reaches them, subject to each listener's socket_mode.
  mkdir -p "$SOCKET_DIR" || die 1 "cannot make $SOCKET_DIR"
  # chmod first: once the directory is rdmagw's, root needs CAP_FOWNER to.
  chmod 0755 "$SOCKET_DIR" || die 1 "cannot chmod $SOCKET_DIR"
  chown "$UID_:$UID_" "$SOCKET_DIR" || die 1 "cannot give $SOCKET_DIR to uid $UID_ (CAP_CHOWN?)"
  log "socket directory $SOCKET_DIR: owner $UID_, mode 0755"
fi

if [ -n "$ADDRESS" ]; then
  if [ "$LINK" != lo ] && ! ip link show "$LINK" >/dev/null 2>&1; then
    ip link add "$LINK" type dummy ||
      die 1 "ip link add $LINK type dummy failed (CAP_NET_ADMIN in the host's network namespace, hostNetwork: true, and the dummy driver are needed; RDMAGW_NODE_LINK=lo needs neither driver)"
  fi
  ip addr replace "$ADDRESS" dev "$LINK" || die 1 "ip addr replace $ADDRESS dev $LINK failed"
  ip link set "$LINK" up || die 1 "ip link set $LINK up failed"
  log "node-local address $ADDRESS on $LINK"
fi
log "done"
