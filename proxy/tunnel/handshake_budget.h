// SPDX-License-Identifier: Apache-2.0
#pragma once
// How many tunnel connections may be in their handshake at once: a
// connection that has not yet authenticated (or, without tunnel.auth, not
// yet sent a valid HELLO) holds a slot from accept until it is admitted or
// gone. Listeners take a slot before they spend anything on a connection
// (a receive buffer, a session, an RDMA QP); with none left the connection
// is refused at once. Two limits: one for the process, and one per remote
// address, so that one host flooding the port cannot keep every other peer
// out. Shared by all workers (a mutex: taken twice per connection, never on
// the data path).
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/log_limiter.h"
#include "common/metrics.h"

namespace rdmagw::tunnel {

class HandshakeBudget;

// One connection's slot; move-only, given back when destroyed or released.
class HandshakeSlot {
 public:
  HandshakeSlot() = default;
  HandshakeSlot(HandshakeSlot&& other) noexcept;
  HandshakeSlot& operator=(HandshakeSlot&& other) noexcept;
  HandshakeSlot(const HandshakeSlot&) = delete;
  HandshakeSlot& operator=(const HandshakeSlot&) = delete;
  ~HandshakeSlot() { release(); }

  explicit operator bool() const { return budget_ != nullptr; }
  void release();

 private:
  friend class HandshakeBudget;
  HandshakeSlot(HandshakeBudget* budget, std::string host) : budget_(budget), host_(std::move(host)) {}
  HandshakeBudget* budget_ = nullptr;
  std::string host_;
};

class HandshakeBudget {
 public:
  HandshakeBudget(uint32_t total, uint32_t per_address) : total_(total), per_address_(per_address) {}

  // Why try_acquire() found no slot.
  enum class Refusal { kNone, kTotal, kAddress };
  // A slot for a connection from `host` (an address without its port), or
  // an empty one with *why set.
  HandshakeSlot try_acquire(const std::string& host, Refusal* why);

  uint32_t in_use() const;
  uint32_t total_limit() const { return total_; }
  uint32_t per_address_limit() const { return per_address_; }

 private:
  friend class HandshakeSlot;
  void give_back(const std::string& host);

  const uint32_t total_;
  const uint32_t per_address_;
  mutable std::mutex mu_;
  uint32_t in_use_ = 0;
  std::unordered_map<std::string, uint32_t> by_host_;
};

// A listener's use of the budget: a slot per accepted connection, or a
// refusal that is counted (rdmagw_tunnel_handshakes_refused_total) and
// logged, rate-limited. One per listener (single-threaded).
class HandshakeGate {
 public:
  // Null `budget`: no limit (every connection gets an empty slot).
  HandshakeGate(HandshakeBudget* budget, metrics::WorkerMetrics* metrics) : budget_(budget), metrics_(metrics) {}
  // `remote`: the peer's address as text ("IP:PORT", "[IP]:PORT"); the
  // per-address limit counts by its IP. Nothing: refuse the connection now.
  std::optional<HandshakeSlot> enter(const std::string& remote, std::string_view transport);

 private:
  HandshakeBudget* budget_;
  metrics::WorkerMetrics* metrics_;
  log::LogLimiter log_{1, 5};
};

// "10.0.0.2:7471" -> "10.0.0.2", "[fd00::2]:7471" -> "[fd00::2]": a peer
// that connects again comes from another port each time. A peer is one
// host whichever transport it uses: "rdma:10.0.0.2:5000" -> "10.0.0.2", and
// an IPv4 peer seen by a dual-stack socket, "[::ffff:10.0.0.2]:7471" ->
// "10.0.0.2".
std::string host_of(const std::string& remote);
// The address:port without the transport's prefix ("rdma:10.0.0.2:5000" ->
// "10.0.0.2:5000"), for parse_host_port.
std::string_view without_transport(std::string_view remote);

}  // namespace rdmagw::tunnel
