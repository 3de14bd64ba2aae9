#pragma once
// A line a peer can make rdmagw write at will (a refused OPEN: one session
// once turned 6 MB of frames into 34 MB of log) is rate-limited: `burst`
// lines at once, then `per_second`. What is dropped is counted and reported
// on the next line written (suppressed=N); metrics still count every event.
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace rdmagw::log {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  LogLimiter(double per_second, double burst) : per_second_(per_second), burst_(burst), tokens_(burst) {}

  // True if a line may be written now; *suppressed is then how many were
  // dropped since the last one written.
  bool allow(Clock::time_point now, uint64_t* suppressed) {
    if (last_ != Clock::time_point{}) {
      double elapsed = std::chrono::duration<double>(now - last_).count();
      tokens_ = std::min(burst_, tokens_ + std::max(0.0, elapsed) * per_second_);
    }
    last_ = now;
    if (tokens_ < 1) {
      ++dropped_;
      return false;
    }
    tokens_ -= 1;
    *suppressed = dropped_;
    dropped_ = 0;
    return true;
  }

 private:
  double per_second_, burst_, tokens_;
  Clock::time_point last_{};
  uint64_t dropped_ = 0;
};

}  // namespace rdmagw::log
