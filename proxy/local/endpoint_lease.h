// SPDX-License-Identifier: Apache-2.0
#pragma once
// A Service endpoint's open connections on one worker, and the lease each of
// them holds on that count: the count is what the next choice among a
// Service's endpoints weighs (proxy/runtime/service_router.h), and it must
// fall when a connection ends however it ends, so the connection holds the
// lease and the lease's destructor gives it back. One worker's thread only.
#include <cstdint>
#include <memory>
#include <utility>

namespace rdmagw::local {

struct EndpointLoad {
  uint32_t open = 0;
};

class EndpointLease {
 public:
  EndpointLease() = default;
  explicit EndpointLease(std::shared_ptr<EndpointLoad> load) : load_(std::move(load)) {
    if (load_) ++load_->open;
  }
  EndpointLease(EndpointLease&& other) noexcept : load_(std::move(other.load_)) {}
  EndpointLease& operator=(EndpointLease&& other) noexcept {
    if (this != &other) {
      release();
      load_ = std::move(other.load_);
    }
    return *this;
  }
  EndpointLease(const EndpointLease&) = delete;
  EndpointLease& operator=(const EndpointLease&) = delete;
  ~EndpointLease() { release(); }

 private:
  void release() {
    if (load_) --load_->open;
    load_.reset();
  }
  std::shared_ptr<EndpointLoad> load_;
};

}  // namespace rdmagw::local
