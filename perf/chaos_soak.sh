#!/usr/bin/env bash
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
trap 'rm -f "$log"' EXIT
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
} > "$out"
echo "wrote $out" >&2
exit "$status"
