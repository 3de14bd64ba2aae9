#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs on host a of the RDMA lab's wire:
#   tools/rdma-lab run --wire -- tests/lab/wire_suite.sh [short | long] [PYTEST-ARGS]
# The link's own checks, then rdmagw across it: a chaos soak
# (tests/lab/wire/test_wire_chaos.py), then each fault on its own
# (tests/lab/wire/test_wire.py, which ends with the carrier faults that leave
# rxe unable to connect again).
# short (CI): 60 s of chaos, 8 streams x 1 MiB; long: 120 s, 16 x 32 MiB (about
# 1.5 h: tools/rdma-lab run --wire --timeout 7200).
set -eu
cd "$(dirname "$0")/../.."
: "${RDMAGW_LAB_PEER_ADDR:?run me through tools/rdma-lab run --wire}"
ulimit -n 65536
mode=${1:-short}
[ $# -gt 0 ] && shift
case $mode in
  short) export RDMAGW_WIRE_STREAMS=${RDMAGW_WIRE_STREAMS:-8} RDMAGW_WIRE_SIZE=${RDMAGW_WIRE_SIZE:-1048576} \
    RDMAGW_WIRE_CHAOS_SECONDS=${RDMAGW_WIRE_CHAOS_SECONDS:-60} ;;
  long) export RDMAGW_WIRE_STREAMS=${RDMAGW_WIRE_STREAMS:-16} RDMAGW_WIRE_SIZE=${RDMAGW_WIRE_SIZE:-33554432} \
    RDMAGW_WIRE_TIMEOUT=${RDMAGW_WIRE_TIMEOUT:-4500} RDMAGW_WIRE_CHAOS_SECONDS=${RDMAGW_WIRE_CHAOS_SECONDS:-120} ;;
  *) echo "usage: $0 [short | long] [PYTEST-ARGS]" >&2; exit 2 ;;
esac
if [ $# -eq 0 ]; then
  echo "== wire: each lab-link fault happens"
  tests/lab/test_wire_link.py
fi
echo "== wire: rdmagw across the link ($mode: $RDMAGW_WIRE_STREAMS x $RDMAGW_WIRE_SIZE bytes)"
exec /usr/bin/python3 -m pytest -q -s -p no:cacheprovider --durations=12 tests/lab/wire/test_wire_chaos.py \
  tests/lab/wire/test_wire.py "$@"
