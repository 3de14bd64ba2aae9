/* SPDX-License-Identifier: Apache-2.0 */
/* What the BPF programs of local_redirect.bpf.c and their loader
 * (proxy/local/local_redirect.cc) share: the maps' key and statistics. C,
 * for both compilers. */
#ifndef RDMAGW_LOCAL_REDIRECT_SHARED_H
#define RDMAGW_LOCAL_REDIRECT_SHARED_H

#include <linux/types.h>

/* The maps' layout: a takeover hands the maps to a new process only if its
 * programs use the same (proxy/local/local_redirect.cc). Raise it with any
 * change to a map, a key, a value or what a value means. */
#define LOCAL_REDIRECT_LAYOUT 3

/* Sockets (and admitted flows) the maps hold at most; ports of interest at
 * most. A flow's own state is socket storage, bounded by the sockets. */
#define LOCAL_REDIRECT_MAX_SOCKETS 65536
#define LOCAL_REDIRECT_MAX_PORTS 1024
/* Flows rdmagw reads at once, each with a read counter (the reads array). */
#define LOCAL_REDIRECT_MAX_SLOTS 65536

/* A socket by its own address and port, then its peer's (IPv4 as
 * ::ffff:a.b.c.d, addresses in network order, ports in host order). A
 * flow is keyed by its sending socket's key. */
struct local_redirect_key {
  __u32 local_ip[4];
  __u32 remote_ip[4];
  __u16 local_port;
  __u16 remote_port;
};

/* A flow rdmagw admitted: one it reads (its read counter is reads[slot]),
 * or one it sends and paces itself (paced: redirected, or by TCP while the
 * reader is behind; rdmagw switches it). */
#define LOCAL_REDIRECT_READ 0
#define LOCAL_REDIRECT_SEND 1
#define LOCAL_REDIRECT_SEND_BY_TCP 2
struct local_redirect_admission {
  __u32 slot;
  __u32 paced; /* LOCAL_REDIRECT_READ, _SEND or _SEND_BY_TCP */
};

/* Transparent listeners reached at connect() (cgroup/connect4): an
 * application's TCP connect to a destination one of these rules holds goes
 * to 127.0.0.1:to_port instead, rdmagw's transparent listener, whose
 * routes then apply as they would to a connection iptables redirected.
 * addr and mask in network order, ports in host order; to_port 0 ends the
 * list. */
#define LOCAL_REDIRECT_MAX_CAPTURES 64
struct local_redirect_capture {
  __u32 addr;
  __u32 mask;
  __u16 port_lo;
  __u16 port_hi;
  __u16 to_port;
  __u16 unused;
};

/* Where an application meant to connect (address in network order, port in
 * host order): kept on its socket for getpeername(), and by the
 * connection's client end (127.0.0.1 and its port) for rdmagw to read as
 * it accepts, as it reads SO_ORIGINAL_DST after iptables. */
struct local_redirect_destination {
  __u32 addr;
  __u16 port;
  __u16 unused;
};
struct local_redirect_client {
  __u32 addr;
  __u16 port;
  __u16 unused;
};

/* Per CPU; the loader sums them. */
struct local_redirect_stats {
  __u64 sockets_added;   /* connections' ends put into the SOCKHASH */
  __u64 sockets_refused; /* ... that the SOCKHASH refused (full) */
  __u64 msgs_redirected;
  __u64 bytes_redirected;
  __u64 msgs_tcp; /* messages of those sockets sent by TCP (bound, order, not admitted, no peer) */
  __u64 bytes_tcp;
  __u64 flows_to_tcp; /* times a flow went to TCP at its bound */
};

#endif
