// SPDX-License-Identifier: Apache-2.0
#include "common/metrics.h"

#include <algorithm>

namespace rdmagw::metrics {

void Histogram::observe_us(uint64_t us) {
  auto it = std::lower_bound(kLatencyBucketsUs.begin(), kLatencyBucketsUs.end(), us);
  buckets_[static_cast<size_t>(it - kLatencyBucketsUs.begin())].add();
  sum_us_.add(us);
}

std::string_view stream_failure_name(StreamFailure f) {
  switch (f) {
    case StreamFailure::kNoSession:
      return "no-session";
    case StreamFailure::kNotAllowed:
      return "not-allowed";
    case StreamFailure::kTargetRefused:
      return "target-refused";
    case StreamFailure::kTargetUnreachable:
      return "target-unreachable";
    case StreamFailure::kPeerGone:
      return "peer-gone";
    case StreamFailure::kReset:
      return "reset";
    case StreamFailure::kResource:
      return "resource";
    case StreamFailure::kProtocol:
      return "protocol";
    case StreamFailure::kShutdown:
      return "shutdown";
    case StreamFailure::kRejected:
      return "rejected";
    case StreamFailure::kLimit:
      return "limit";
    case StreamFailure::kIdle:
      return "idle";
    case StreamFailure::kCount:
      break;
  }
  return "unknown";
}

std::string_view transport_loss_name(TransportLoss loss) {
  switch (loss) {
    case TransportLoss::kPeerClosed:
      return "peer-closed";
    case TransportLoss::kKeepaliveTimeout:
      return "keepalive-timeout";
    case TransportLoss::kRetryExceeded:
      return "retry-exceeded";
    case TransportLoss::kCompletionError:
      return "completion-error";
    case TransportLoss::kIoError:
      return "io-error";
    case TransportLoss::kProtocolError:
      return "protocol-error";
    case TransportLoss::kLocalError:
      return "local-error";
    case TransportLoss::kDeviceRemoved:
      return "device-removed";
    case TransportLoss::kCount:
      break;
  }
  return "unknown";
}

std::string_view transport_index_name(size_t index) { return index == 0 ? "tcp" : "rdma"; }

ListenerMetrics& WorkerMetrics::listener(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = listeners_.find(name);
  if (it == listeners_.end()) it = listeners_.emplace(std::string(name), std::make_unique<ListenerMetrics>()).first;
  return *it->second;
}

PeerMetrics& WorkerMetrics::peer(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(name);
  if (it != peers_.end()) return *it->second;
  // Peer node names come from the network: bound the label set.
  if (peers_.size() >= kMaxPeers) name = kOtherPeers;
  it = peers_.find(name);
  if (it == peers_.end()) it = peers_.emplace(std::string(name), std::make_unique<PeerMetrics>()).first;
  return *it->second;
}

void WorkerMetrics::for_each_listener(const std::function<void(const std::string&, const ListenerMetrics&)>& fn) const {
  std::lock_guard lock(mu_);
  for (const auto& [name, m] : listeners_) fn(name, *m);
}

void WorkerMetrics::for_each_peer(const std::function<void(const std::string&, const PeerMetrics&)>& fn) const {
  std::lock_guard lock(mu_);
  for (const auto& [name, m] : peers_) fn(name, *m);
}

}  // namespace rdmagw::metrics
