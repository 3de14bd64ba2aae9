// SPDX-License-Identifier: Apache-2.0
// top: a live view refreshed every interval, until Ctrl-C or --count frames.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "tools/rdmagwctl/commands.h"
#include "tools/rdmagwctl/views.h"

namespace rdmagw::ctl {

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t interrupted = 0;

void on_interrupt(int) { interrupted = 1; }

// Ctrl-C ends `top` normally (exit 0) instead of killing it mid-frame. No
// SA_RESTART: the signal also cuts short a sleep or a pending request.
void catch_interrupt() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

void sleep_interruptibly(double seconds) {
  timespec left{static_cast<time_t>(seconds), static_cast<long>(std::fmod(seconds, 1.0) * 1e9)};
  while (!interrupted && nanosleep(&left, &left) != 0) {
  }
}

std::string wall_clock() {
  time_t now = time(nullptr);
  tm local{};
  localtime_r(&now, &local);
  char buf[16];
  strftime(buf, sizeof(buf), "%H:%M:%S", &local);
  return buf;
}

}  // namespace

int run_top(const CommandContext& ctx, const TopOptions& options) {
  catch_interrupt();
  bool terminal = isatty(STDOUT_FILENO);
  std::string error;
  Json previous;
  if (!ctx.admin.get_json("/stats", &previous, &error)) {
    print_error(error);
    return kExitFailure;
  }
  auto previous_at = Clock::now();
  for (int64_t frame = 0; options.count == 0 || frame < options.count; ++frame) {
    sleep_interruptibly(options.interval_seconds);
    if (interrupted) break;
    Json current;
    if (!ctx.admin.get_json("/stats", &current, &error)) {
      if (interrupted) break;
      print_error(error);
      return kExitFailure;
    }
    auto now = Clock::now();
    double elapsed = std::chrono::duration<double>(now - previous_at).count();
    std::string text = wall_clock() + "  " + render_top(previous, current, elapsed);
    if (terminal) {
      // Home and clear, then the frame: a screen that updates in place.
      fputs("\x1b[H\x1b[2J", stdout);
      fputs(text.c_str(), stdout);
      fputs("\n(refreshing every ", stdout);
      printf("%gs; Ctrl-C quits)\n", options.interval_seconds);
    } else {
      // A log of frames, one blank line apart, for pipes and tests.
      if (frame > 0) fputs("\n", stdout);
      fputs(text.c_str(), stdout);
    }
    fflush(stdout);
    previous = std::move(current);
    previous_at = now;
  }
  return kExitOk;
}

}  // namespace rdmagw::ctl
