#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The long chaos soak: tests/integration/test_chaos.py (which CI runs for 90 s)
# for SECONDS (default 1800), its summary recorded in perf/results/.
#
#   perf/chaos_soak.sh [SECONDS] [OUT]
#
# Needs root (network namespaces, iptables) and a build (tools/dev/build).
# RDMAGW_CHAOS_SEED=N replays a run's sequence of faults; RDMAGW_CHAOS_FAULTS
# picks the kinds (default: all, takeover included).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-1800}
out=${2:-$root/perf/results/$(date -u +%F)-chaos-soak-${seconds}s.md}
log=$(mktemp)
# The machine's view beside the soak's (steal, run queue, memory, every
# second): a soak failure during a starved or paused machine says so.
vmlog=$(mktemp)
vmstat -t 1 > "$vmlog" &
vmstat_pid=$!
trap 'kill $vmstat_pid 2>/dev/null; rm -f "$log" "$vmlog"' EXIT
echo "chaos soak: ${seconds} s; summary goes to $out" >&2
status=0
export RDMAGW_CHAOS_FAULTS=${RDMAGW_CHAOS_FAULTS:-reset,close,drop,link,takeover}
RDMAGW_CHAOS_SECONDS=$seconds /usr/bin/python3 -m pytest "$root/tests/integration/test_chaos.py" \
  -q -s -p no:cacheprovider 2>&1 | tee "$log" || status=$?
{
  echo "# Chaos soak, ${seconds} s ($(date -u +%FT%TZ))"
  echo
  echo "Command: \`perf/chaos_soak.sh $seconds\` at $(git -C "$root" rev-parse --short HEAD)," \
       "on $(nproc) cores; pytest exit status $status."
  echo
  echo '```'
  grep -E '^(chaos|  )' "$log" | grep -v '^  File' || true
  tail -n 1 "$log"
  echo '```'
  echo
  echo "The machine (vmstat -t 1): the worst seconds by steal, run queue and free memory:"
  echo
  echo '```'
  awk 'NR > 2 && $1 ~ /^[0-9]+$/ {
         if ($17 > st) { st = $17; st_at = $19 }
         if ($1 > r) { r = $1; r_at = $19 }
         if (free == "" || $4 < free) { free = $4; free_at = $19 }
         if ($17 >= 50) paused++
       }
       END { printf "steal max %d%% at %s (%d s at 50%% or more); run queue max %d at %s; free min %d MiB at %s\n",
                    st, st_at, paused, r, r_at, free / 1024, free_at }' "$vmlog"
  echo '```'
} > "$out"
echo "wrote $out" >&2
exit "$status"
