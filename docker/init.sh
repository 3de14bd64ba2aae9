#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# rdmagw init step: installs the iptables rules that send the application's
# outbound TCP connections to rdmagw's transparent listener, in the network
# namespace it runs in (the pod's, or the one compose services share).
#
# Run it once per namespace, before the application and the sidecar start, as
# root with CAP_NET_ADMIN (plus CAP_NET_RAW, which iptables-legacy needs) and
# nothing else: a Kubernetes initContainer, a compose service that exits.
# The sidecar itself never needs NET_ADMIN.  See docs/deploy.md.
#
#   init.sh [install]   print the rules (rdmagw-iptables --dry-run), then
#                       install them; running it again replaces them
#   init.sh cleanup     remove them (IPv4; also IPv6 with RDMAGW_IPV6=1)
#
# Environment (lists are separated by spaces or commas):
#   RDMAGW_CAPTURE        required for install: CIDR[:PORT|:LO-HI] ... to
#                         redirect (IPv6: [ADDR]:PORT or CIDR:PORT)
#   RDMAGW_UID            the uid rdmagw runs as; its own connections are never
#                         redirected (default 1337, the image's rdmagw user)
#   RDMAGW_GID            a gid whose connections are never redirected either:
#                         rdmagw's group where it runs as root (the local legs
#                         past TCP in a pod; default: none)
#   RDMAGW_EXCLUDE_PORTS  destination PORT or LO-HI never redirected
#   RDMAGW_EXCLUDE_CIDRS  destination networks never redirected
#   RDMAGW_REDIRECT_PORT  the transparent listener's port (default 15001)
#   RDMAGW_IPV6           1: also install ip6tables rules for the IPv6 entries
#                         of the lists above (default 0: IPv4 only)
#   RDMAGW_IPTABLES_CMD   iptables command prefix, e.g. iptables-legacy when
#                         the node uses the legacy backend (default: iptables,
#                         ip6tables; Debian 12's are the nft backend)
#   RDMAGW_IPTABLES_TOOL  the rdmagw-iptables to run (default: from PATH)
#
# Exit status: 0 done; 1 rules not installed (no CAP_NET_ADMIN, iptables
# missing or refusing); 2 bad settings.
set -eu
set -f  # list entries such as [fd00::1]:80 must not be globbed

PROG=rdmagw-init
log() { printf '%s: %s\n' "$PROG" "$*"; }
die() {  # die STATUS MESSAGE...
  status=$1
  shift
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit "$status"
}

UID_=${RDMAGW_UID:-1337}
GID_=${RDMAGW_GID:-}
REDIRECT_PORT=${RDMAGW_REDIRECT_PORT:-15001}
IPV6=${RDMAGW_IPV6:-0}
IPTABLES_CMD=${RDMAGW_IPTABLES_CMD:-}
TOOL=${RDMAGW_IPTABLES_TOOL:-rdmagw-iptables}
IFS=' ,	
'

case $IPV6 in
  0 | 1) ;;
  *) die 2 "RDMAGW_IPV6 must be 0 or 1, got '$IPV6'" ;;
esac

action=${1:-install}
case $action in
  install | cleanup) ;;
  -h | --help)
    sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
    ;;
  *) die 2 "unknown command '$action' (use: init.sh [install|cleanup])" ;;
esac
[ $# -le 1 ] || die 2 "too many arguments (settings come from RDMAGW_* variables; see init.sh --help)"

if ! command -v "$TOOL" >/dev/null 2>&1; then
  die 1 "rdmagw-iptables not found ('$TOOL'); set RDMAGW_IPTABLES_TOOL to its path"
fi
if ! command -v python3 >/dev/null 2>&1; then
  die 1 "python3 not found; rdmagw-iptables is a Python 3 script"
fi

# family ENTRY: 6 for an IPv6 address or network ([ADDR]..., or two or more
# colons), else 4.  IPv4 entries have at most one colon (before the port).
family() {
  case $1 in
    \[* | *:*:*) echo 6 ;;
    *) echo 4 ;;
  esac
}

# of_family FAMILY LIST...: the entries of that family, one per line.
of_family() {
  want=$1
  shift
  for entry in "$@"; do
    [ "$(family "$entry")" = "$want" ] && printf '%s\n' "$entry"
  done
  return 0
}

# run_tool FAMILY ARGS...: rdmagw-iptables for one address family.
run_tool() {
  fam=$1
  shift
  [ "$fam" = 6 ] && set -- "$@" --ipv6
  [ -n "$IPTABLES_CMD" ] && set -- "$@" --iptables-cmd "$(prefix_for "$fam")"
  "$TOOL" "$@"
}

# prefix_for FAMILY: RDMAGW_IPTABLES_CMD for IPv4; its ip6tables twin for IPv6
# (iptables-legacy -> ip6tables-legacy, /usr/sbin/iptables -> /usr/sbin/ip6tables).
prefix_for() {
  if [ "$1" = 6 ]; then
    dir=
    case $IPTABLES_CMD in */*) dir=${IPTABLES_CMD%/*}/ ;; esac
    base=${IPTABLES_CMD##*/}
    case $base in
      iptables*) printf '%s\n' "${dir}ip6tables${base#iptables}" ;;
      *) printf '%s\n' "$IPTABLES_CMD" ;;
    esac
  else
    printf '%s\n' "$IPTABLES_CMD"
  fi
}

family_name() { if [ "$1" = 6 ]; then echo IPv6; else echo IPv4; fi; }

if [ "$action" = cleanup ]; then
  families=4
  [ "$IPV6" = 1 ] && families="4 6"
  for fam in $families; do
    log "removing the $(family_name "$fam") rules"
    rc=0
    run_tool "$fam" cleanup || rc=$?
    [ "$rc" = 0 ] || die "$rc" "cleanup of the $(family_name "$fam") rules failed (exit $rc; rdmagw-iptables said why above)"
  done
  log "done"
  exit 0
fi

# ---- install
CAPTURE=${RDMAGW_CAPTURE:-}
EXCLUDE_PORTS=${RDMAGW_EXCLUDE_PORTS:-}
EXCLUDE_CIDRS=${RDMAGW_EXCLUDE_CIDRS:-}
# shellcheck disable=SC2086  # splitting the lists into entries is the point
set -- $CAPTURE
[ $# -gt 0 ] || die 2 "RDMAGW_CAPTURE is not set: give the destinations to redirect to rdmagw, e.g. RDMAGW_CAPTURE='10.0.0.0/8:6379 10.1.0.0/16' (CIDR[:PORT|:LO-HI], separated by spaces)"

if [ "$IPV6" = 0 ]; then
  # shellcheck disable=SC2086
  for entry in $CAPTURE $EXCLUDE_CIDRS; do
    [ "$(family "$entry")" = 4 ] ||
      die 2 "'$entry' is IPv6 but RDMAGW_IPV6 is not 1 (set RDMAGW_IPV6=1 to install ip6tables rules too)"
  done
fi

families=
# shellcheck disable=SC2086
[ -n "$(of_family 4 $CAPTURE)" ] && families=4
# shellcheck disable=SC2086
if [ "$IPV6" = 1 ]; then
  if [ -n "$(of_family 6 $CAPTURE)" ]; then
    families="$families 6"
  else
    log "note: RDMAGW_IPV6=1 but RDMAGW_CAPTURE has no IPv6 entry: no ip6tables rules to install"
  fi
fi

# tool_install FAMILY [--dry-run]: rdmagw-iptables install with that family's
# entries of the lists.
tool_install() {
  fam=$1
  shift
  set -- install "$@" --uid "$UID_" --redirect-port "$REDIRECT_PORT"
  [ -z "$GID_" ] || set -- "$@" --gid "$GID_"
  # shellcheck disable=SC2086
  for entry in $(of_family "$fam" $CAPTURE); do set -- "$@" --capture "$entry"; done
  # shellcheck disable=SC2086
  for entry in $EXCLUDE_PORTS; do set -- "$@" --exclude-port "$entry"; done
  # shellcheck disable=SC2086
  for entry in $(of_family "$fam" $EXCLUDE_CIDRS); do set -- "$@" --exclude-cidr "$entry"; done
  run_tool "$fam" "$@"
}

log "redirecting outbound TCP to: $CAPTURE"
log "  to port $REDIRECT_PORT on loopback (rdmagw's transparent listener); never for uid $UID_ (rdmagw itself)"
[ -z "$GID_" ] || log "  nor for gid $GID_ (rdmagw itself, running as root)"
[ -z "$EXCLUDE_PORTS" ] || log "  except to ports: $EXCLUDE_PORTS"
[ -z "$EXCLUDE_CIDRS" ] || log "  except to networks: $EXCLUDE_CIDRS"

# Every family's settings are checked (dry run) before anything changes.
for fam in $families; do
  log "$(family_name "$fam") rules (rdmagw-iptables install --dry-run):"
  rc=0
  tool_install "$fam" --dry-run || rc=$?
  [ "$rc" = 0 ] || die "$rc" "rdmagw-iptables refused these settings (exit $rc, reason above); nothing was installed"
done
installed=
for fam in $families; do
  rc=0
  tool_install "$fam" || rc=$?
  if [ "$rc" != 0 ]; then
    [ -z "$installed" ] ||
      log "the $installed rules stay installed: fix the cause and run init.sh again (it replaces them), or init.sh cleanup"
    die "$rc" "installing the $(family_name "$fam") rules failed (exit $rc, reason above)"
  fi
  installed="$installed${installed:+ and }$(family_name "$fam")"
done
log "done: $installed rules installed"
