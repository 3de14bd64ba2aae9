#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# rdmagw sidecar entrypoint: checks the configuration, warns about a memlock
# limit too low for RDMA, then execs rdmagw, so that rdmagw itself is the
# container's main process and receives SIGTERM (graceful drain) directly.
#
#   entrypoint.sh [RDMAGW OPTION...]   e.g. --log-level debug
#   entrypoint.sh COMMAND [ARG...]     a first argument that is not an option
#                                      runs COMMAND instead (sh, rdmagw-iptables, ...)
#
# Environment:
#   RDMAGW_CONFIG  the configuration file (default /etc/rdmagw/rdmagw.yaml)
#   RDMAGW_UID     the uid the init step exempted from the redirect (default
#                  1337); a warning if rdmagw would run as another uid
#   RDMAGW_GID     the gid the init step also exempted (rdmagw as root, for
#                  the local legs past TCP); then the warning is for another gid
#   RDMAGW_BIN     the rdmagw binary (default /usr/local/bin/rdmagw)
#   RDMAGW_ADMIN   where rdmagwctl (the HEALTHCHECK, probes, docker exec)
#                  looks for the admin endpoint (default 127.0.0.1:9901); a
#                  warning if the configuration's `admin:` is elsewhere
#
# Exit status before rdmagw starts: 2 invalid or unreadable configuration,
# 1 rdmagw missing; afterwards, rdmagw's own (0 after a SIGTERM drain).
set -eu

PROG=rdmagw-entrypoint
RDMAGW_CONFIG=${RDMAGW_CONFIG:-/etc/rdmagw/rdmagw.yaml}
RDMAGW_BIN=${RDMAGW_BIN:-/usr/local/bin/rdmagw}
note() { printf '%s: %s\n' "$PROG" "$*" >&2; }

case ${1-} in
  "" | -*) ;;
  *) exec "$@" ;;
esac

[ -x "$RDMAGW_BIN" ] || { note "error: rdmagw binary not found or not executable: $RDMAGW_BIN"; exit 1; }

# 1. The configuration, checked by rdmagw itself: one FILE:LINE:COL: key:
#    message line per problem.
rc=0
out=$("$RDMAGW_BIN" --check --config "$RDMAGW_CONFIG" 2>&1) || rc=$?
[ -z "$out" ] || printf '%s\n' "$out" >&2
if [ "$rc" != 0 ]; then
  if [ ! -e "$RDMAGW_CONFIG" ]; then
    note "error: no configuration at $RDMAGW_CONFIG: mount one there (ConfigMap, bind mount) or set RDMAGW_CONFIG"
  elif [ ! -r "$RDMAGW_CONFIG" ]; then
    note "error: $RDMAGW_CONFIG is not readable by uid $(id -u): make it world-readable (ConfigMap defaultMode 0444)"
  elif [ "$rc" = 2 ]; then
    note "error: $RDMAGW_CONFIG is invalid (each line above: FILE:LINE:COL: key: message); not starting rdmagw. Keys: docs/configuration.md"
  else
    note "error: rdmagw --check failed (exit $rc); not starting rdmagw"
    exit "$rc"
  fi
  exit 2
fi

# The configuration without comments (the file just passed --check).
config_text() { sed -e 's/^[[:space:]]*#.*//' -e 's/[[:space:]]#.*//' "$RDMAGW_CONFIG"; }

# config_value KEY: the first value given to KEY, read the simple way (block
# or flow style). Good enough here: --check rejects duplicate and unknown
# keys, and each key asked for (workers, transport, slab_size) exists once.
config_value() {
  config_text | grep -oE "(^|[[:space:]{,])$1:[[:space:]]*[\"']?[0-9A-Za-z]+( ?[KMG]iB)?" |
    head -n 1 | sed -E "s/.*$1:[[:space:]]*[\"']?//; s/ //"
}

# number TEXT: TEXT as a decimal number without leading zeros, or nothing.
number() {
  case $1 in '' | *[!0-9]*) return 0 ;; esac
  n=$1
  while [ "${#n}" -gt 1 ] && [ "${n#0}" != "$n" ]; do n=${n#0}; done
  echo "$n"
}

# kib SIZE: a byte size as the configuration writes it (16KiB, 64MiB, 1GiB or
# plain bytes) in KiB, or nothing.
kib() {
  n=$(number "${1%[KMG]iB}")
  [ -n "$n" ] || return 0
  case $1 in
    *KiB) echo "$n" ;;
    *MiB) echo $((n * 1024)) ;;
    *GiB) echo $((n * 1024 * 1024)) ;;
    *) echo $((n / 1024)) ;;
  esac
}

# 2. Memory locking: with RDMA, each worker pins tunnel.rdma.slab_size, and
#    rdmagw uses RDMA only if the memlock limit covers workers x slab_size
#    (otherwise transport auto falls back to TCP, transport rdma refuses to
#    start). Warn now, with the numbers; rdmagw logs the same reason.
transport=$(config_value transport)
# shellcheck disable=SC3045  # dash (Debian's /bin/sh) and bash both have ulimit -l
limit=$(ulimit -l)
if [ "${transport:-auto}" != tcp ] && [ "$limit" != unlimited ]; then
  workers=$(number "$(config_value workers)")
  [ -n "$workers" ] || workers=$(number "$(getconf _NPROCESSORS_ONLN 2>/dev/null)")
  [ -n "$workers" ] || workers=1
  [ "$workers" -le 256 ] || workers=256  # rdmagw's cap on its default
  slab=$(kib "$(config_value slab_size)")
  [ -n "$slab" ] || slab=$((128 * 1024))
  need=$((workers * slab))
  if [ "$limit" -lt "$need" ]; then
    note "warning: memlock limit (ulimit -l) is $limit KiB, below the $need KiB RDMA pins (workers x tunnel.rdma.slab_size = $workers x $((slab / 1024)) MiB)"
    if [ "${transport:-auto}" = rdma ]; then
      note "warning: so transport rdma will refuse to start on a host with an RDMA device"
    else
      note "warning: so transport auto will use TCP even where an RDMA device is present"
    fi
    note "warning: raise it (compose: -f compose.rdma.yaml, which sets ulimits: memlock: -1; Kubernetes: the node's container runtime), see docs/deploy.md and docs/rdma.md"
  fi
fi

# 3. The redirect exempts one uid; rdmagw running as another would have its
#    own connections to captured destinations redirected back into itself.
want_uid=${RDMAGW_UID:-1337}
want_gid=${RDMAGW_GID:-}
if config_text | grep -q 'transparent:'; then
  if [ -n "$want_gid" ]; then
    [ "$(id -g)" = "$want_gid" ] || [ "$(id -u)" = "$want_uid" ] ||
      note "warning: running as uid $(id -u) gid $(id -g), but the iptables redirect exempts uid $want_uid (RDMAGW_UID) and gid $want_gid (RDMAGW_GID): rdmagw's own connections to captured destinations would loop back into it"
  elif [ "$(id -u)" != "$want_uid" ]; then
    note "warning: running as uid $(id -u), but the iptables redirect exempts uid $want_uid (RDMAGW_UID): rdmagw's own connections to captured destinations would loop back into it"
  fi
fi

# 4. rdmagwctl finds the admin endpoint through RDMAGW_ADMIN, not through the
#    configuration: if they disagree, the HEALTHCHECK and the probes ask the
#    wrong address and the container never turns healthy or ready.
default_admin=127.0.0.1:9901
admin=$(config_text | sed -n -E "s/^admin:[[:space:]]*[\"']?([^\"'[:space:]]+)[\"']?[[:space:]]*\$/\1/p" | head -n 1)
admin=${admin:-$default_admin}
want_admin=${RDMAGW_ADMIN:-$default_admin}
admin_host=${admin%:*}
if [ "${admin##*:}" != "${want_admin##*:}" ] ||
  { [ "$admin_host" != "${want_admin%:*}" ] && [ "$admin_host" != 0.0.0.0 ] && [ "$admin_host" != "[::]" ]; }; then
  note "warning: the admin endpoint is $admin (admin: in $RDMAGW_CONFIG) but rdmagwctl, the HEALTHCHECK and the probes ask RDMAGW_ADMIN=$want_admin: set RDMAGW_ADMIN=$admin in the container's environment"
fi

exec "$RDMAGW_BIN" --config "$RDMAGW_CONFIG" "$@"
