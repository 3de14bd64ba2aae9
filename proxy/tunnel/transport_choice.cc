// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/transport_choice.h"

#include <algorithm>

namespace rdmagw::tunnel {

namespace {
// auto: consecutive RDMA failures after which the peer's sessions use TCP.
constexpr uint32_t kRdmaFailuresBeforeTcp = 3;
}  // namespace

TransportKind TransportChoice::preferred() const {
  if (!has_rdma_ || tunnel_.transport == TransportMode::kTcp) return TransportKind::kTcp;
  if (tunnel_.transport == TransportMode::kAuto && !in_rdma_share()) return TransportKind::kTcp;
  if (tunnel_.transport == TransportMode::kRdma || rdma_failures_ < kRdmaFailuresBeforeTcp) return TransportKind::kRdma;
  return TransportKind::kTcp;
}

bool TransportChoice::in_rdma_share() const {
  if (tunnel_.rdma_share >= 100) return true;
  // FNV-1a: the same answer on every worker, restart and build.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  mix(node_);
  mix(std::string_view("\0", 1));
  mix(peer_address_);
  return h % 100 < tunnel_.rdma_share;
}

std::optional<uint32_t> TransportChoice::tcp_head_start_ms() const {
  if (tunnel_.transport != TransportMode::kAuto || tunnel_.rdma_head_start_ms == 0 || !has_tcp_) return std::nullopt;
  return std::min(tunnel_.rdma_head_start_ms, tunnel_.connect_timeout_ms / 2);
}

void TransportChoice::carrying(TransportKind kind, Clock::time_point now) {
  if (kind == TransportKind::kRdma)
    rdma_since_ = now;
  else
    rdma_since_.reset();
}

std::optional<Clock::duration> TransportChoice::transport_lost(Clock::time_point now) {
  if (!rdma_since_) return std::nullopt;
  Clock::duration lived = now - *rdma_since_;
  rdma_since_.reset();
  if (lived >= rdma_proving_time()) return std::nullopt;
  ++rdma_failures_;
  return lived;
}

void TransportChoice::tick(Clock::time_point now) {
  if (rdma_since_ && rdma_failures_ > 0 && now - *rdma_since_ >= rdma_proving_time()) rdma_failures_ = 0;
}

Clock::duration TransportChoice::rdma_proving_time() const {
  return std::chrono::milliseconds(2ull * tunnel_.keepalive_timeout_ms);
}

std::string TransportChoice::rdma_share_reason() const {
  return "tunnel.rdma_share is " + std::to_string(tunnel_.rdma_share) + "%, and this peer is not in that share";
}

std::optional<std::string> TransportChoice::tcp_by_setting() const {
  if (tunnel_.transport == TransportMode::kTcp) return "configured";
  if (!has_rdma_) return "no usable RDMA device here";
  if (!in_rdma_share()) return rdma_share_reason();
  return std::nullopt;
}

const std::string& TransportChoice::opened_on(TransportKind kind) {
  if (kind == TransportKind::kRdma) {
    reason_ = "RDMA CM connect succeeded";
  } else if (std::optional<std::string> setting = tcp_by_setting()) {
    reason_ = std::move(*setting);
  } else if (reason_.empty()) {
    reason_ = "RDMA failed; falling back";
  }
  return reason_;
}

std::string TransportChoice::reason() const {
  if (!reason_.empty()) return reason_;
  return tcp_by_setting().value_or("RDMA device available");
}

}  // namespace rdmagw::tunnel
