// SPDX-License-Identifier: Apache-2.0
#pragma once
// The limits of the tunnel protocol that configuration values travel under.
//
// Each value a sidecar announces to its peer comes from its configuration
// (HELLO max_data = tunnel.buffer_size, stream_window = tunnel.stream_window,
// session_window = tunnel.session_budget, node = node; RDMA CM private data
// recv_depth = tunnel.rdma.recv_depth). The frame decoder refuses a peer whose
// values lie outside these limits, and the config parser refuses a file whose
// values lie outside them, both from these constants: a configuration that
// `rdmagw --check` accepts therefore never produces a handshake its peer
// refuses. Documented in docs/protocol.md ("Limits") and
// docs/configuration.md.
#include <cstddef>
#include <cstdint>

namespace rdmagw {

// HELLO max_data (tunnel.buffer_size): the largest DATA payload the sender
// accepts, and so the size of its receive buffers.
inline constexpr uint32_t kMaxDataMin = 1024;
inline constexpr uint32_t kMaxDataMax = 1024 * 1024;

// HELLO stream_window (tunnel.stream_window): the initial receive window of
// each stream. A HELLO must also have stream_window >= max_data.
inline constexpr uint32_t kStreamWindowMin = kMaxDataMin;
inline constexpr uint32_t kStreamWindowMax = 64 * 1024 * 1024;

// HELLO session_window (tunnel.session_budget): what a whole session may hold
// buffered at the receiver. A HELLO must also have session_window >=
// stream_window. The upper bound keeps what a peer can make us queue bounded.
inline constexpr uint64_t kSessionWindowMin = kStreamWindowMin;
inline constexpr uint64_t kSessionWindowMax = 4ull * 1024 * 1024 * 1024;  // 2^32

// HELLO node (the top-level `node`): its length travels in one byte.
inline constexpr size_t kMaxNodeNameLength = 255;

// OPEN target: an endpoint in canonical text form ("tcp:[IPv6]:PORT",
// "unix:/path"); its length travels in a u16 but is capped here. Every
// endpoint the config parser accepts is shorter (config_parser.cc asserts it).
inline constexpr size_t kMaxTargetLength = 300;

// OPEN's origin (docs/protocol.md, "Origin"), at its longest: a
// connection id, then two addresses (family, IPv6 address, port).
inline constexpr size_t kMaxOriginLength = 16 + 2 * (1 + 16 + 2);
// An OPEN's payload before its first bytes, at its longest: target length,
// target, origin length, origin.
inline constexpr size_t kMaxOpenPrefix = 2 + kMaxTargetLength + 1 + kMaxOriginLength;

// RDMA CM private data recv_depth (tunnel.rdma.recv_depth): receives each
// session keeps posted, i.e. the send credits it grants its peer.
inline constexpr uint32_t kRdmaRecvDepthMin = 8;
inline constexpr uint32_t kRdmaRecvDepthMax = 8192;

// Room a local-side buffer keeps in front of the payload so that an OPEN or
// DATA header can be written in place, without copying the payload. Every
// buffer is kBufferHeadroom + buffer_size bytes (tunnel.rdma.slab_size must
// hold a few sessions' worth).
inline constexpr size_t kBufferHeadroom = 512;

// Largest payload of any frame.
inline constexpr uint32_t kMaxPayload = kMaxDataMax + kBufferHeadroom;

static_assert(kStreamWindowMax <= UINT32_MAX, "HELLO stream_window is a u32");
static_assert(kMaxNodeNameLength <= UINT8_MAX, "HELLO node_len is a u8");
static_assert(kMaxTargetLength <= UINT16_MAX, "OPEN target_len is a u16");
static_assert(kMaxDataMin <= kStreamWindowMin && kStreamWindowMin <= kSessionWindowMin,
              "the smallest values of each key must be consistent with each other");
static_assert(kMaxDataMax <= kStreamWindowMax && kStreamWindowMax <= kSessionWindowMax,
              "the largest values of each key must be consistent with each other");
static_assert(kMaxOriginLength <= UINT8_MAX, "OPEN origin_len is a u8");
static_assert(kMaxOpenPrefix + kMaxDataMax <= kMaxPayload,
              "the largest OPEN (target, origin and first bytes) fits in a frame");

}  // namespace rdmagw
