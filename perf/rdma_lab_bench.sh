#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Benchmark inside the RDMA lab VM (Soft-RoCE under TCG emulation):
#
#   tools/rdma-lab run --timeout 900 -- perf/rdma_lab_bench.sh [SECONDS]
#
# Measures, in the same VM run and on the same rxe device:
#   1. ib_write_bw -R (64 KiB writes)            vs  bulk through the rdmagw pair (iperf3)
#   2. ib_send_lat -R (64-byte sends, one-way)   vs  64-byte ping-pong through the pair
# and prints ratios. Absolute numbers under emulation mean little; the ratios
# say how much of what the device gives the tunnel keeps.
#
# RDMAGW_BENCH_PROFILE=1 also samples the whole VM (perf record -a, cpu-clock)
# during ib_write_bw and during the pair's bulk run, and prints where the
# vCPUs went in each, by thread and by symbol (nothing written in the guest
# survives, so the reports go to stdout).
set -eu
cd "$(dirname "$0")/.."
: "${RDMAGW_LAB_ADDR:?run me through tools/rdma-lab}"
: "${RDMAGW_LAB_DEVICE:?run me through tools/rdma-lab}"
secs=${1:-5}
buffer=${RDMAGW_BENCH_BUFFER:-32768}   # tunnel.buffer_size of both sidecars (rdmagw's default)
busy=${RDMAGW_BENCH_BUSY_POLL_US:-0}    # tunnel.rdma.busy_poll_us
transport=${RDMAGW_BENCH_TRANSPORT:-rdma}  # rdma, or tcp to compare the carrier
depth=${RDMAGW_BENCH_RECV_DEPTH:-64}   # tunnel.rdma.recv_depth (rdmagw's default)
profile=${RDMAGW_BENCH_PROFILE:-0}     # 1: profile the two bulk runs
ulimit -l unlimited
ulimit -n 65536
bin=$PWD/build/bin/rdmagw
work=$(mktemp -d)
dev=$RDMAGW_LAB_DEVICE
addr=$RDMAGW_LAB_ADDR

profiled() {  # $1: name, $2: file for the command's output, then the command
  name=$1
  out=$2
  shift 2
  if [ "$profile" != 1 ]; then
    "$@" >"$out"
    return
  fi
  # perf starts the command itself once it records: under emulation perf
  # takes seconds to start, and a run begun beside it would go unseen.
  perf record -q -a -g -e cpu-clock -F 499 -o "$work/$name.data" -- "$@" >"$out"
  echo "-- where the vCPUs went during $name, by thread (tid:comm; 0:swapper is idle)"
  perf report -i "$work/$name.data" --stdio --no-children --sort pid -g none --percent-limit 1 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -20
  echo "-- during $name, by thread and symbol"
  perf report -i "$work/$name.data" --stdio --no-children --sort pid,dso,sym -g none --percent-limit 0.8 \
    2>/dev/null | grep -v '^#' | grep -v '^$' | head -45
  echo "-- during $name, where the largest symbols were called from"
  perf report -i "$work/$name.data" --stdio --no-children --sort comm,sym -g caller,2,callee,function,percent \
    --percent-limit 4 2>/dev/null | grep -v '^#' | grep -v '^$' | head -160
}

echo "== ib_write_bw -R -s 65536 -D $secs"
ib_write_bw -R -d "$dev" -s 65536 -D "$secs" >"$work/bw_server" 2>&1 &
bw_server=$!
sleep 2
profiled ib_write_bw "$work/bw_client" ib_write_bw -R -d "$dev" -s 65536 -D "$secs" "$addr"
wait "$bw_server" || true
# Columns: #bytes #iterations BW peak BW average MsgRate
ib_bw=$(awk '$1 == 65536 {print $4}' "$work/bw_client" | tail -1)
echo "   ib_write_bw average: $ib_bw MiB/s (perftest's MB/sec is 2^20 bytes a second)"

echo "== ib_send_lat -R -s 64 -n 2000"
ib_send_lat -R -d "$dev" -s 64 -n 2000 >"$work/lat_server" 2>&1 &
lat_server=$!
sleep 2
# A client that finds no server yet (binaries load slowly over 9p) exits at
# once: try again rather than leave the server waiting for ever.
tries=0
until timeout 60 ib_send_lat -R -d "$dev" -s 64 -n 2000 "$addr" >"$work/lat_client" 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -ge 3 ]; then
    echo "   ib_send_lat: no run after 3 tries:"; cat "$work/lat_client"; kill "$lat_server" 2>/dev/null || true
    break
  fi
  sleep 2
done
wait "$lat_server" || true
# Columns: #bytes #iterations t_min t_max t_typical ...
ib_lat=$(awk '$1 == 64 {print $5}' "$work/lat_client" | tail -1)
echo "   ib_send_lat typical (one-way): $ib_lat us"

echo "== rdmagw pair on transport: rdma"
# The tunnel is on the lab's address, so it authenticates (docs/security.md).
(umask 077 && head -c 32 /dev/urandom | base64 >"$work/key")
cat >"$work/b.yaml" <<Y
node: host-b
admin: 127.0.0.1:17489
workers: 1
log_level: info
tunnel: {address: $addr, tcp_port: 17481, rdma_port: 17482, transport: $transport, buffer_size: $buffer, rdma: {slab_size: 128MiB, busy_poll_us: $busy, recv_depth: $depth}, auth: {mode: psk, key_files: ["$work/key"]}}
targets: ["tcp:127.0.0.1:16401", "tcp:127.0.0.1:16402"]
Y
cat >"$work/a.yaml" <<Y
node: host-a
admin: 127.0.0.1:17479
workers: 1
log_level: info
tunnel: {address: $addr, tcp_port: 17471, rdma_port: 17472, transport: $transport, buffer_size: $buffer, rdma: {slab_size: 128MiB, busy_poll_us: $busy, recv_depth: $depth}, auth: {mode: psk, key_files: ["$work/key"]}}
peers:
  - {name: host-b, address: $addr, tcp_port: 17481, rdma_port: 17482, connect: always}
listeners:
  - {name: bulk, listen: "tcp:127.0.0.1:16411", peer: host-b, target: "tcp:127.0.0.1:16401"}
  - {name: echo, listen: "tcp:127.0.0.1:16412", peer: host-b, target: "tcp:127.0.0.1:16402"}
Y
iperf3 -s -p 16401 >/dev/null 2>&1 &
iperf_pid=$!
/usr/bin/python3 - <<'PY' &
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 16402)); s.listen(16)
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
for _ in range(32):
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
echo_pid=$!
"$bin" --config "$work/b.yaml" 2>"$work/b.log" &
b_pid=$!
"$bin" --config "$work/a.yaml" 2>"$work/a.log" &
a_pid=$!
# The session is dialled at start (connect: always), so that neither its
# RDMA CM connect nor the registration of both slabs (seconds under
# emulation) falls inside the measured runs. Wait for it: session_open is
# an info line.
i=0
while ! grep -q "event=session_open" "$work/a.log" 2>/dev/null; do
  i=$((i + 1))
  if [ $i -ge 600 ]; then
    echo "rdma_lab_bench: no session from A to B after 600 polls; A's log:" >&2
    cat "$work/a.log" >&2
    kill "$a_pid" "$b_pid" "$iperf_pid" "$echo_pid" 2>/dev/null || true
    exit 1
  fi
  sleep 0.1
done
sleep 1
echo "   sidecar A (iperf3's client side): pid $a_pid, threads $(ls /proc/$a_pid/task | tr '\n' ' ')"
echo "   sidecar B (the server side): pid $b_pid, threads $(ls /proc/$b_pid/task | tr '\n' ' ')"

cpu_ticks() {  # utime + stime of both sidecars, in clock ticks
  for p in "$a_pid" "$b_pid"; do sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}'; done | awk '{s += $1} END {print s}'
}
received_and_queued() {  # B's payload from A: "received queued" bytes (GET /stats)
  /usr/bin/python3 -c 'import json, sys, urllib.request
peers = json.load(urllib.request.urlopen("http://127.0.0.1:17489/stats", timeout=10))["peers"]
p = [p for p in peers if p["name"] == "host-a"]
sys.exit("B has no peer host-a in GET /stats") if not p else print(p[0]["bytes_received"], p[0]["queued_bytes"])' \
    || { echo "rdma_lab_bench: cannot read B's payload counters (GET /stats)" >&2; kill "$a_pid" "$b_pid" 2>/dev/null; exit 1; }
}
payload=$(received_and_queued)
read -r received_before queued_before <<EOF2
$payload
EOF2
cpu_before=$(cpu_ticks)
profiled pair_bulk "$work/iperf.json" iperf3 -c 127.0.0.1 -p 16411 -t "$secs" -J
cpu_after=$(cpu_ticks)
read -r tunnel_bw gib <<EOF2
$(/usr/bin/python3 -c 'import json,sys; e = json.load(open(sys.argv[1]))["end"]["sum_received"]; print("%.1f %.4f" % (e["bits_per_second"] / 8 / 2**20, e["bytes"] / 2**30))' "$work/iperf.json")
EOF2
cpu_per_gib=$(echo "$cpu_before $cpu_after $gib $(getconf CLK_TCK)" | awk '{printf "%.2f", ($2 - $1) / $4 / $3}')
echo "   iperf3 through the pair: $tunnel_bw MiB/s; both sidecars' CPU: $cpu_per_gib s per GiB"
if [ "$profile" = 1 ]; then
  echo "   (measured while perf sampled every vCPU: the profile's cost is in both figures)"
fi
# How much of the bulk payload B could not hand to iperf3's socket straight
# from the RDMA receive buffer, and copied into the stream's queue instead
# (docs/rdma.md, "Copies"): what holding receive buffers would save.
payload=$(received_and_queued)
read -r received_after queued_after <<EOF2
$payload
EOF2
queued_share=$(echo "$received_before $received_after $queued_before $queued_after" \
  | awk '{r = $2 - $1; printf "%.4f", (r > 0 ? ($4 - $3) / r : 0)}')
echo "   B received $((received_after - received_before)) payload bytes from A during the bulk run, copied $((queued_after - queued_before)) into the stream's queue: share $queued_share"

pingpong_at() {  # $1: port -> median 64-byte round trip in us
/usr/bin/python3 - "$1" <<'PY'
import socket, statistics, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
msg = b"x" * 64
rtts = []
for i in range(1200):
    t = time.perf_counter()
    c.sendall(msg)
    got = b""
    while len(got) < 64:
        got += c.recv(64 - len(got))
    if i >= 200:  # warm-up excluded
        rtts.append((time.perf_counter() - t) * 1e6)
print("%.1f" % statistics.median(rtts))
PY
}
pingpong=$(pingpong_at 16412)
direct=$(pingpong_at 16402)
echo "   64-byte ping-pong through the pair: median round trip $pingpong us (direct to the echo server: $direct us)"

kill -TERM "$a_pid" "$b_pid" "$iperf_pid" 2>/dev/null || true
kill "$echo_pid" 2>/dev/null || true
wait 2>/dev/null || true

echo
echo "transport $transport, buffer_size $buffer, recv_depth $depth, busy_poll_us $busy; both sidecars' CPU $cpu_per_gib s per GiB of bulk; B queued (copied) $queued_share of the bulk payload"
echo "| measure (same VM run, rxe under TCG) | device | through rdmagw | ratio |"
echo "|---|---:|---:|---:|"
echo "| bulk MiB/s: ib_write_bw -R 64 KiB vs iperf3 through the pair | $ib_bw | $tunnel_bw | $(echo "$tunnel_bw $ib_bw" | awk '{printf "%.2f", $1/$2}') |"
rt=$(echo "$ib_lat" | awk '{printf "%.2f", 2*$1}')
echo "| 64 B round trip us: 2 x ib_send_lat -R typical vs ping-pong through the pair | $rt | $pingpong | $(echo "$rt $pingpong" | awk '{printf "%.2f", $1/$2}') |"
echo "| 64 B round trip us: loopback TCP straight to the echo server vs through the pair | $direct | $pingpong | $(echo "$direct $pingpong" | awk '{printf "%.2f", $1/$2}') |"
echo "(latency ratios = baseline round trip / tunnel round trip: 1.00 would be no overhead)"
rm -rf "$work"
