#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The chaos soak across the RDMA lab's wire: tests/lab/wire/test_wire_chaos.py
# (which CI runs for 60 s in tests/lab/wire_suite.sh short) for SECONDS
# (default 1200): random link faults under mixed traffic, every stream checked
# by SHA-256. Its summary is recorded in perf/results/.
#
#   perf/wire_chaos_soak.sh [SECONDS] [OUT]
#
# Needs root (the lab) and a build (tools/dev/build).
# RDMAGW_WIRE_CHAOS_SEED=N replays a run's sequence of faults;
# RDMAGW_WIRE_CHAOS_FAULTS picks the kinds (test_wire_chaos.py's KINDS; by
# default all of them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-1200}
out=${2:-$root/perf/results/$(date -u +%F)-wire-chaos-soak-${seconds}s.md}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "wire chaos soak: ${seconds} s; summary goes to $out" >&2
status=0
"$root/tools/rdma-lab" run --wire --timeout $((seconds + 900)) \
  -e RDMAGW_WIRE_CHAOS_SECONDS="$seconds" ${RDMAGW_WIRE_CHAOS_SEED:+-e RDMAGW_WIRE_CHAOS_SEED=$RDMAGW_WIRE_CHAOS_SEED} \
  -- /usr/bin/python3 -m pytest -q -s -p no:cacheprovider "$root/tests/lab/wire/test_wire_chaos.py" 2>&1 |
  tee "$log" || status=$?
{
  echo "# Chaos soak across the lab's wire, ${seconds} s ($(date -u +%FT%TZ))"
  echo
  echo "Command: \`perf/wire_chaos_soak.sh $seconds\` at $(git -C "$root" rev-parse --short HEAD)," \
       "on $(nproc) cores (two VMs under TCG, one vCPU each), faults ${RDMAGW_WIRE_CHAOS_FAULTS:-all kinds}; exit status $status."
  echo
  echo '```'
  # pytest colours its summary; the record is plain text.
  sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^chaos:' || true
  sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '(passed|failed|error)' | tail -n 1 || true
  echo '```'
  if [[ $status -ne 0 ]]; then
    echo
    echo "The failed round, as the test described it:"
    echo
    echo '```'
    sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^E ' | sed 's/^E *//' | head -n 80
    echo '```'
  fi
} > "$out"
echo "wrote $out" >&2
exit "$status"
