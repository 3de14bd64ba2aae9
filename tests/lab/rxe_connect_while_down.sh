#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Shows a Soft-RoCE (rdma_rxe) defect without rdmagw, in the RDMA lab
# (tools/rdma-lab run -- tests/lab/rxe_connect_while_down.sh): an RDMA CM
# connect attempted while the link is down ends with UNREACHABLE, and after
# the link is up again every RDMA CM connect in that boot hangs (rxe sends,
# receives nothing). A link flap with no connect during it leaves rxe
# working. Exit status 0 when the defect shows (rping works before and
# hangs after), 1 when it does not.
set -u
: "${RDMAGW_LAB_ADDR:?run me through tools/rdma-lab}"
A=$RDMAGW_LAB_ADDR N=$RDMAGW_LAB_NETDEV C=/sys/class/infiniband/$RDMAGW_LAB_DEVICE/ports/1/hw_counters

rping_ok() {  # one rping exchange to this host's address, bounded
  rping -s -a "$A" -C 1 >/dev/null 2>&1 &
  server=$!
  sleep 1
  timeout 8 rping -c -a "$A" -C 1 >/dev/null 2>&1
  rc=$?
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  echo "  rxe packets sent $(cat $C/sent_pkts), received $(cat $C/rcvd_pkts)"
  return $rc
}

echo "rping before: "; rping_ok || { echo "rping fails before the test"; exit 1; }
echo "link down; one RDMA CM connect while it is down; link up"
ip link set dev "$N" down
timeout 10 rping -c -a "$A" -C 1 >/dev/null 2>&1
ip link set dev "$N" up
sleep 2
echo "rping after:"
if rping_ok; then echo "rping works: the defect did not show"; exit 1; fi
echo "rping hangs after the link came back: the defect shows"
