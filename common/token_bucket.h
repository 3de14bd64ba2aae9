// SPDX-License-Identifier: Apache-2.0
#pragma once
// A token bucket: `burst` events at once, then `per_second`. For rates a
// peer or a client controls (log lines, OPENs); single-threaded.
#include <algorithm>
#include <chrono>

namespace rdmagw {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  TokenBucket(double per_second, double burst) : per_second_(per_second), burst_(burst), tokens_(burst) {}

  // True if one event may happen now (and takes its token).
  bool take(Clock::time_point now) {
    if (last_ != Clock::time_point{}) {
      double elapsed = std::chrono::duration<double>(now - last_).count();
      tokens_ = std::min(burst_, tokens_ + std::max(0.0, elapsed) * per_second_);
    }
    last_ = now;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

 private:
  double per_second_, burst_, tokens_;
  Clock::time_point last_{};
};

}  // namespace rdmagw
