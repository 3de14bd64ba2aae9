#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The local legs' order soak: for SECONDS (default 600), flows switch between
# redirection and TCP as fast as the bound makes them (a flow rdmagw reads,
# 4 KiB bound: every round crosses it; a flow rdmagw sends, paced by
# RedirectedLeg to a reader that pauses), every byte checked against its
# sequence. The hidden "[.soak]" case of tests/unit/local_redirect_test.cc;
# its last line goes to OUT (default: stdout only).
#
#   perf/local_legs_soak.sh [SECONDS] [OUT]
#   perf/local_legs_soak.sh 10          # the short mode tools/test runs
#
# Needs root, cgroup v2, and a build with the BPF programs (tools/dev/build
# with clang, bpftool and libbpf-dev).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-600}
out=${2:-}
binary=${RDMAGW_BUILD_DIR:-$root/build}/bin/local_redirect_tests
if [[ ! -x "$binary" ]]; then
  echo "local_legs_soak: $binary not found (a build with clang, bpftool and libbpf-dev makes it)" >&2
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "local legs soak: ${seconds} s" >&2
status=0
RDMAGW_SOAK_SECONDS=$seconds "$binary" "[.soak]" 2>&1 | tee "$log" || status=$?
if [[ -n "$out" ]]; then
  {
    echo "# Local legs order soak, ${seconds} s ($(date -u +%FT%TZ))"
    echo
    echo "Command: \`perf/local_legs_soak.sh $seconds\` at $(git -C "$root" rev-parse --short HEAD)," \
      "kernel $(uname -r), exit status $status."
    echo
    grep -E "^soak" "$log" | tail -1
  } > "$out"
fi
exit $status
