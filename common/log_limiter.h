// SPDX-License-Identifier: Apache-2.0
#pragma once
// A line a peer can make rdmagw write at will (a refused OPEN: one session
// once turned 6 MB of frames into 34 MB of log) is rate-limited: `burst`
// lines at once, then `per_second`. What is dropped is counted and reported
// on the next line written (suppressed=N); metrics still count every event.
#include <cstdint>

#include "common/token_bucket.h"

namespace rdmagw::log {

class LogLimiter {
 public:
  using Clock = TokenBucket::Clock;
  LogLimiter(double per_second, double burst) : bucket_(per_second, burst) {}

  // True if a line may be written now; *suppressed is then how many were
  // dropped since the last one written.
  bool allow(Clock::time_point now, uint64_t* suppressed) {
    if (!bucket_.take(now)) {
      ++dropped_;
      return false;
    }
    *suppressed = dropped_;
    dropped_ = 0;
    return true;
  }

 private:
  TokenBucket bucket_;
  uint64_t dropped_ = 0;
};

}  // namespace rdmagw::log
