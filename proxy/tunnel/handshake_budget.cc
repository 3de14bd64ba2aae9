// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/handshake_budget.h"

#include "common/log.h"

namespace rdmagw::tunnel {

HandshakeSlot::HandshakeSlot(HandshakeSlot&& other) noexcept : budget_(other.budget_), host_(std::move(other.host_)) {
  other.budget_ = nullptr;
}

HandshakeSlot& HandshakeSlot::operator=(HandshakeSlot&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = other.budget_;
    host_ = std::move(other.host_);
    other.budget_ = nullptr;
  }
  return *this;
}

void HandshakeSlot::release() {
  if (!budget_) return;
  budget_->give_back(host_);
  budget_ = nullptr;
}

HandshakeSlot HandshakeBudget::try_acquire(const std::string& host, Refusal* why) {
  std::lock_guard lock(mu_);
  if (in_use_ >= total_) {
    *why = Refusal::kTotal;
    return {};
  }
  uint32_t& mine = by_host_[host];
  if (mine >= per_address_) {
    *why = Refusal::kAddress;
    return {};
  }
  ++mine;
  ++in_use_;
  *why = Refusal::kNone;
  return HandshakeSlot(this, host);
}

void HandshakeBudget::give_back(const std::string& host) {
  std::lock_guard lock(mu_);
  --in_use_;
  auto it = by_host_.find(host);
  if (it != by_host_.end() && --it->second == 0) by_host_.erase(it);
}

uint32_t HandshakeBudget::in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}

std::optional<HandshakeSlot> HandshakeGate::enter(const std::string& remote, std::string_view transport) {
  if (!budget_) return HandshakeSlot{};
  std::string host = host_of(remote);
  HandshakeBudget::Refusal why = HandshakeBudget::Refusal::kNone;
  HandshakeSlot slot = budget_->try_acquire(host, &why);
  if (slot) return slot;
  if (metrics_) metrics_->handshakes_refused.add();
  uint64_t suppressed = 0;
  if (log_.allow(log::LogLimiter::Clock::now(), &suppressed)) {
    bool total = why == HandshakeBudget::Refusal::kTotal;
    log::Line line = log::warn("handshake_refused");
    line.kv("remote", host)
        .kv("transport", transport)
        .kv("limit", total ? "tunnel.limits.handshakes" : "tunnel.limits.handshakes_per_address")
        .kv("max", total ? budget_->total_limit() : budget_->per_address_limit())
        .kv("reason", total ? "too many connections in their handshake at once"
                            : "too many connections from this address in their handshake at once");
    if (suppressed) line.kv("suppressed", suppressed);
  }
  return std::nullopt;
}

std::string_view without_transport(std::string_view remote) {
  constexpr std::string_view kRdma = "rdma:";
  return remote.starts_with(kRdma) ? remote.substr(kRdma.size()) : remote;
}

std::string host_of(const std::string& remote) {
  std::string_view text = without_transport(remote);
  size_t colon = text.rfind(':');
  size_t bracket = text.rfind(']');
  // No port: no colon, or only those inside [IPv6].
  std::string_view host = colon == std::string_view::npos || (bracket != std::string_view::npos && colon < bracket)
                              ? text
                              : text.substr(0, colon);
  constexpr std::string_view kMapped = "[::ffff:";
  if (host.starts_with(kMapped) && host.ends_with(']') && host.find('.') != std::string_view::npos)
    host = host.substr(kMapped.size(), host.size() - kMapped.size() - 1);
  return std::string(host);
}

}  // namespace rdmagw::tunnel
