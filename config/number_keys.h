// SPDX-License-Identifier: Apache-2.0
#pragma once
// The configuration's numeric keys that sit in a section of their own (the
// tunnel's, access_log's, metrics', local_legs'), each once: its range, its
// form, what a reload does with it, and the member of Config it fills, which
// has the key's own name (the key tunnel.limits.handshakes is
// Config::tunnel.limits.handshakes, by construction: the macro below spells
// both from one token).
//
// Everything else follows from this table: the parser reads these keys
// (config_parser.cc), config_keys.h lists them, config_diff.cc refuses or
// reports a change to them, GET /config shows them (admin_render.cc), and
// tests/unit/config_keys_test.cc changes each one. Adding a numeric tunnel
// key (or one of those sections') is one line here, its member in config.h,
// the code that uses it, and its row in docs/configuration.md (which that
// test demands).
//
// Keys whose checks relate them to others (stream_window at least
// buffer_size, ...) are checked where their section is parsed; keys that are
// not plain numbers (ports, addresses, choices), tunnel.rdma.max_pinned (0
// stands for a computed budget), top-level numbers and those of list items
// (listeners[].max_connections, ...) are parsed by hand.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "common/protocol_limits.h"
#include "config/config.h"

namespace rdmagw::config_keys {

inline constexpr uint64_t kMiB = 1024 * 1024;
inline constexpr uint64_t kGiB = 1024 * kMiB;
inline constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();

enum class Form {
  kCount,  // a plain number (milliseconds, a count, a percentage)
  kSize,   // bytes: also 64KiB, 32MiB, 1GiB
};
enum class OnReload {
  kRestart,  // a reload that changes it is refused
  kApply,    // a reload applies it, and says so in its changes
};

struct NumberKey {
  std::string_view section;  // "tunnel", "tunnel.limits", "tunnel.rdma", "access_log", "metrics", "local_legs"
  std::string_view name;     // the key within its section
  uint64_t min, max;
  Form form;
  OnReload on_reload;
  uint64_t (*get)(const Config&);
  void (*set)(Config&, uint64_t);  // with a value the parser checked against min and max
};

// SECTION and NAME are the member path (tunnel.limits, handshakes): the key's
// text is theirs, so the two cannot drift apart.
// clang-format off
#define RDMAGW_NUMBER_KEY(SECTION, NAME, MIN, MAX, FORM, ON_RELOAD)                               \
  NumberKey{#SECTION, #NAME, MIN, MAX, Form::FORM, OnReload::ON_RELOAD,                           \
            [](const Config& c) -> uint64_t { return c.SECTION.NAME; },                           \
            [](Config& c, uint64_t v) { c.SECTION.NAME = static_cast<decltype(c.SECTION.NAME)>(v); }}
// clang-format on

inline constexpr NumberKey kNumberKeys[] = {
    // Announced in HELLO; their ranges are the protocol's.
    RDMAGW_NUMBER_KEY(tunnel, buffer_size, kMaxDataMin, kMaxDataMax, kSize, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, stream_window, kStreamWindowMin, kStreamWindowMax, kSize, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, session_budget, kSessionWindowMin, kSessionWindowMax, kSize, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, keepalive_interval_ms, 100, 3'600'000, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, keepalive_timeout_ms, 1, kU32Max, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, connect_timeout_ms, 100, 600'000, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, reconnect_min_ms, 1, 600'000, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, reconnect_max_ms, 100, 600'000, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, resume_timeout_ms, 0, 600'000, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, rdma_probe_interval_ms, 0, 600'000, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel, rdma_head_start_ms, 0, 600'000, kCount, kRestart),
    // Fleet keys: a reload applies them to the links it keeps.
    RDMAGW_NUMBER_KEY(tunnel, session_idle_ms, 0, 86'400'000, kCount, kApply),
    RDMAGW_NUMBER_KEY(tunnel, max_sessions, 1, 1'000'000, kCount, kApply),
    RDMAGW_NUMBER_KEY(tunnel, sessions_per_peer, 0, 256, kCount, kApply),
    RDMAGW_NUMBER_KEY(tunnel, rdma_share, 0, 100, kCount, kApply),
    RDMAGW_NUMBER_KEY(tunnel.limits, handshakes, 1, 65536, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.limits, handshakes_per_address, 1, 65536, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.limits, streams_per_session, 0, kU32Max, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.limits, opens_per_second, 0, kU32Max, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.limits, sessions_per_address, 1, 65536, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.rdma, slab_size, kMiB, 64 * kGiB, kSize, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.rdma, recv_depth, kRdmaRecvDepthMin, kRdmaRecvDepthMax, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.rdma, send_depth, 8, 8192, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.rdma, busy_poll_us, 0, 1'000'000, kCount, kRestart),
    RDMAGW_NUMBER_KEY(tunnel.rdma, inline_threshold, 0, 96, kCount, kRestart),
    RDMAGW_NUMBER_KEY(access_log, lines_per_second, 1, 1'000'000, kCount, kApply),
    // At most the peers a worker counts apart (metrics::WorkerMetrics::kMaxPeers).
    RDMAGW_NUMBER_KEY(metrics, peer_series, 0, 1024, kCount, kApply),
    // The sockmap programs' bound is set when they are attached, at start.
    RDMAGW_NUMBER_KEY(local_legs, max_in_flight, 16 * 1024, 64 * kMiB, kSize, kRestart),
};

#undef RDMAGW_NUMBER_KEY

// "tunnel.limits.handshakes".
inline std::string number_key_path(const NumberKey& k) { return std::string(k.section) + "." + std::string(k.name); }

}  // namespace rdmagw::config_keys
