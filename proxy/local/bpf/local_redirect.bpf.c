// SPDX-License-Identifier: Apache-2.0
// The local legs without the TCP stack (docs/architecture.md, "Local
// legs"): loopback connections to and from rdmagw are put into a SOCKHASH
// when they are established, and each message one end sends is queued
// straight on the other end's receive queue, skipping TCP/IP.
//
// Each direction of a connection is a flow: its state on its sending
// socket (socket storage), its admission keyed by that socket's own
// address and port, then its peer's. A flow is redirected only once rdmagw
// has admitted it (the admissions map), as one of two kinds:
//
// - rdmagw reads it (an application, or a server, sends to rdmagw): at
//   most max_in_flight bytes may be redirected and not yet read by rdmagw,
//   which counts what it read in the mmap-able `reads` array (no syscall).
//   A message past that takes the normal TCP path, whose window stops the
//   writer until rdmagw reads, as it always has. The receiver reads its
//   redirect queue before TCP's receive queue, so once a flow has sent by
//   TCP it stays on TCP until rdmagw has read every byte it sent, and only
//   then redirects again: bytes never overtake each other.
// - rdmagw sends it: rdmagw paces itself, from what the kernel says the
//   receiver holds unread (socket_memory.h): redirected, or by TCP while
//   the reader is behind (rdmagw switches the admission; it goes back only
//   once the reader has read everything, so again nothing overtakes).
//
// A flow not admitted (yet, or ever: two applications of the same host)
// sends by TCP, counted, so that the order rule above holds from its first
// byte.
#include <linux/bpf.h>
#include <linux/types.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "local_redirect_shared.h"

// The kernel reads this: the programs call no GPL-only helper.
char LICENSE[] SEC("license") = "Apache-2.0";

#define AF_INET 2
#define AF_INET6 10
#define TCP_CLOSE 7

// Set by the loader before the programs are loaded.
const volatile __u64 max_in_flight = 256 * 1024;
// rdmagw's own connects are never captured: by its uid, or its gid, when
// not 0 (the loader leaves capture off where rdmagw is root:root).
const volatile __u32 exempt_uid = 0;
const volatile __u32 exempt_gid = 0;

struct {
  __uint(type, BPF_MAP_TYPE_SOCKHASH);
  __uint(max_entries, LOCAL_REDIRECT_MAX_SOCKETS);
  __type(key, struct local_redirect_key);
  __type(value, __u64);
} sockets SEC(".maps");

// What the kernel keeps of a flow, on its sending socket (made when the
// socket is established, gone with it): socket storage, not a hash by key,
// as every message reads it.
struct flow {
  __u64 sent;    // bytes sent since the connection was established (redirected or by TCP)
  __u32 on_tcp;  // 1: by TCP until the reader has read all it was sent
  __u32 unused;
};

struct {
  __uint(type, BPF_MAP_TYPE_SK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct flow);
} flows SEC(".maps");

// Flows rdmagw admitted (local_redirect_shared.h).
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, LOCAL_REDIRECT_MAX_SOCKETS);
  __type(key, struct local_redirect_key);
  __type(value, struct local_redirect_admission);
} admissions SEC(".maps");

// What rdmagw read of each flow it reads, by slot; written by rdmagw
// through a shared mapping, read here.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __uint(max_entries, LOCAL_REDIRECT_MAX_SLOTS);
  __type(key, __u32);
  __type(value, __u64);
} reads SEC(".maps");

// Ports whose loopback connections are redirected (rdmagw's listeners, the
// local targets it connects to); the loader fills it.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, LOCAL_REDIRECT_MAX_PORTS);
  __type(key, __u16);
  __type(value, __u8);
} ports SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct local_redirect_stats);
} stats SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, LOCAL_REDIRECT_MAX_CAPTURES);
  __type(key, __u32);
  __type(value, struct local_redirect_capture);
} captures SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_SK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct local_redirect_destination);
} destinations SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, LOCAL_REDIRECT_MAX_SOCKETS);
  __type(key, struct local_redirect_client);
  __type(value, struct local_redirect_destination);
} accepted SEC(".maps");

static __always_inline struct local_redirect_stats* my_stats(void) {
  __u32 zero = 0;
  return bpf_map_lookup_elem(&stats, &zero);
}

// IPv4 as ::ffff:a.b.c.d, so that a dual-stack socket and an IPv4 one see
// the same connection under one key.
static __always_inline void mapped(__u32 out[4], __u32 v4) {
  out[0] = 0;
  out[1] = 0;
  out[2] = bpf_htonl(0xffff);
  out[3] = v4;
}

static __always_inline int is_loopback(const __u32 ip[4]) {
  if (ip[0] == 0 && ip[1] == 0 && ip[2] == bpf_htonl(0xffff)) return (bpf_ntohl(ip[3]) >> 24) == 127;
  return ip[0] == 0 && ip[1] == 0 && ip[2] == 0 && ip[3] == bpf_htonl(1);
}

// A socket's key from what sock_ops and sk_msg contexts say of it
// (local_port: host order; remote_port: the network-order port, in the
// upper half of the word on a little-endian machine, which bpf_ntohl brings
// down on either byte order). False for a family other than IPv4/IPv6.
static __always_inline int fill_key(struct local_redirect_key* key, __u32 family, __u32 local4, __u32 remote4,
                                    const __u32 local6[4], const __u32 remote6[4], __u32 local_port,
                                    __u32 remote_port) {
  if (family == AF_INET) {
    mapped(key->local_ip, local4);
    mapped(key->remote_ip, remote4);
  } else if (family == AF_INET6) {
    __builtin_memcpy(key->local_ip, local6, sizeof(key->local_ip));
    __builtin_memcpy(key->remote_ip, remote6, sizeof(key->remote_ip));
  } else {
    return 0;
  }
  key->local_port = (__u16)local_port;
  key->remote_port = (__u16)bpf_ntohl(remote_port);
  return 1;
}

static __always_inline void reverse(struct local_redirect_key* out, const struct local_redirect_key* in) {
  __builtin_memcpy(out->local_ip, in->remote_ip, sizeof(out->local_ip));
  __builtin_memcpy(out->remote_ip, in->local_ip, sizeof(out->remote_ip));
  out->local_port = in->remote_port;
  out->remote_port = in->local_port;
}

SEC("sockops")
int local_redirect_sockops(struct bpf_sock_ops* skops) {
  struct local_redirect_key key = {};
  __u32 op = skops->op;
  if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB &&
      op != BPF_SOCK_OPS_STATE_CB)
    return 1;
  // Every field read once, before any branch: the verifier refuses a
  // context field read through a pointer the compiler offset elsewhere.
  __u32 family = skops->family;
  __u32 local4 = skops->local_ip4, remote4 = skops->remote_ip4;
  // 4 bytes at a time, as the context allows: volatile, or the compiler
  // may read two neighbours as one 8-byte word, which the verifier refuses.
  const volatile __u32* l6 = skops->local_ip6;
  const volatile __u32* r6 = skops->remote_ip6;
  __u32 local6[4] = {l6[0], l6[1], l6[2], l6[3]};
  __u32 remote6[4] = {r6[0], r6[1], r6[2], r6[3]};
  __u32 local_port = skops->local_port, remote_port = skops->remote_port;
  struct bpf_sock* sk = skops->sk;
  if (!fill_key(&key, family, local4, remote4, local6, remote6, local_port, remote_port)) return 1;
  if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && family == AF_INET && sk) {
    // A connect that local_redirect_connect4 sent to a transparent
    // listener: its destination, by the client end rdmagw will accept.
    struct local_redirect_destination* d = bpf_sk_storage_get(&destinations, sk, 0, 0);
    if (d) {
      struct local_redirect_client client = {.addr = local4, .port = (__u16)local_port};
      bpf_map_update_elem(&accepted, &client, d, BPF_ANY);
    }
  }
  if (op == BPF_SOCK_OPS_STATE_CB) {
    // The connection ends: its admission goes (the kernel takes the socket
    // out of the SOCKHASH itself, and its flow with the socket).
    if (skops->args[1] == TCP_CLOSE) bpf_map_delete_elem(&admissions, &key);
    return 1;
  }
  if (!sk || !is_loopback(key.local_ip) || !is_loopback(key.remote_ip)) return 1;
  if (!bpf_map_lookup_elem(&ports, &key.local_port) && !bpf_map_lookup_elem(&ports, &key.remote_port)) return 1;
  struct local_redirect_stats* s = my_stats();
  struct flow* f = bpf_sk_storage_get(&flows, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
  if (!f) {
    if (s) s->sockets_refused++;
    return 1;
  }
  f->sent = 0;
  f->on_tcp = 0;
  if (bpf_sock_hash_update(skops, &sockets, &key, BPF_ANY) != 0) {
    if (s) s->sockets_refused++;
    bpf_sk_storage_delete(&flows, sk);
    return 1;
  }
  bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
  if (s) s->sockets_added++;
  return 1;
}

SEC("sk_msg")
int local_redirect_msg(struct sk_msg_md* msg) {
  struct local_redirect_key key = {}, peer;
  __u32 family = msg->family;
  __u32 local4 = msg->local_ip4, remote4 = msg->remote_ip4;
  // As in sock_ops: 4 bytes at a time.
  const volatile __u32* l6 = msg->local_ip6;
  const volatile __u32* r6 = msg->remote_ip6;
  __u32 local6[4] = {l6[0], l6[1], l6[2], l6[3]};
  __u32 remote6[4] = {r6[0], r6[1], r6[2], r6[3]};
  __u32 local_port = msg->local_port, remote_port = msg->remote_port;
  if (!fill_key(&key, family, local4, remote4, local6, remote6, local_port, remote_port)) return SK_PASS;
  __u64 size = msg->size;
  __u64 redirected = 0;
  struct local_redirect_stats* s = my_stats();
  struct bpf_sock* sk = msg->sk;
  if (!sk) return SK_PASS;
  struct flow* f = bpf_sk_storage_get(&flows, sk, 0, 0);
  if (!f) return SK_PASS;  // not established under these programs: TCP
  struct local_redirect_admission* a = bpf_map_lookup_elem(&admissions, &key);
  if (!a) goto by_tcp;
  if (a->paced != LOCAL_REDIRECT_READ) {
    // rdmagw sends, and paces itself: by TCP while it says so (the reader
    // is behind; it switches back only once the reader has read every
    // byte), else redirected.
    if (a->paced == LOCAL_REDIRECT_SEND_BY_TCP) goto by_tcp;
  } else {
    __u32 slot = a->slot;
    __u64* r = bpf_map_lookup_elem(&reads, &slot);
    __u64 read = r ? *(volatile __u64*)r : 0;
    if (f->on_tcp) {
      if (f->sent != read) goto by_tcp;
      f->on_tcp = 0;  // rdmagw read every byte sent by TCP: redirecting keeps the order
    }
    if (f->sent != read && f->sent - read + size > max_in_flight) {
      // Past the bound: TCP's window paces the writer until rdmagw reads.
      if (s) s->flows_to_tcp++;
      goto by_tcp;
    }
  }
  reverse(&peer, &key);
  if (bpf_msg_redirect_hash(msg, &sockets, &peer, BPF_F_INGRESS) != SK_PASS) goto by_tcp;  // the peer left
  redirected = 1;
  goto count;
by_tcp:
  f->on_tcp = 1;
count:
  __sync_fetch_and_add(&f->sent, size);
  if (s) {
    // Every counter at a constant offset, the path chosen by value: with
    // one store per path the compiler merges the two into a store at
    // s + (32 or 40), pointer arithmetic the verifier refuses to a loader
    // without CAP_PERFMON (a sidecar has CAP_BPF and CAP_NET_ADMIN only).
    s->msgs_redirected += redirected;
    s->bytes_redirected += size * redirected;
    s->msgs_tcp += 1 - redirected;
    s->bytes_tcp += size * (1 - redirected);
  }
  return SK_PASS;
}

SEC("cgroup/connect4")
int local_redirect_connect4(struct bpf_sock_addr* ctx) {
  if (ctx->type != 1 /* SOCK_STREAM */) return 1;
  __u64 ids = bpf_get_current_uid_gid();
  if ((exempt_uid && (__u32)ids == exempt_uid) || (exempt_gid && (__u32)(ids >> 32) == exempt_gid)) return 1;
  __u32 addr = ctx->user_ip4;
  __u16 port = bpf_ntohs((__u16)ctx->user_port);
  // Unrolled: a loop whose counter lives only in the lookup's key on the
  // stack looks, to the verifier, like the same state again (an "infinite
  // loop"); 64 short rules are a few hundred instructions.
#pragma clang loop unroll(full)
  for (__u32 i = 0; i < LOCAL_REDIRECT_MAX_CAPTURES; ++i) {
    __u32 index = i;
    struct local_redirect_capture* c = bpf_map_lookup_elem(&captures, &index);
    if (!c || c->to_port == 0) return 1;
    if ((addr & c->mask) != c->addr || port < c->port_lo || port > c->port_hi) continue;
    struct bpf_sock* sk = ctx->sk;
    if (!sk) return 1;
    struct local_redirect_destination* d =
        bpf_sk_storage_get(&destinations, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
    if (!d) return 1;  // no memory for it: this connection goes on as it would without rdmagw's capture
    d->addr = addr;
    d->port = port;
    ctx->user_ip4 = bpf_htonl(0x7f000001);
    ctx->user_port = bpf_htons(c->to_port);
    return 1;
  }
  return 1;
}

// The application asks where it is connected: where it meant to, not the
// listener its connect was sent to.
SEC("cgroup/getpeername4")
int local_redirect_getpeername4(struct bpf_sock_addr* ctx) {
  struct bpf_sock* sk = ctx->sk;
  if (!sk) return 1;
  struct local_redirect_destination* d = bpf_sk_storage_get(&destinations, sk, 0, 0);
  if (d) {
    ctx->user_ip4 = d->addr;
    ctx->user_port = bpf_htons(d->port);
  }
  return 1;
}
