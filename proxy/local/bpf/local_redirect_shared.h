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
#define LOCAL_REDIRECT_LAYOUT 1

/* Sockets and flows the maps hold at most; ports of interest at most. */
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
