// SPDX-License-Identifier: Apache-2.0
#pragma once
// rdmagwctl's commands. Each prints its result on stdout, problems on stderr
// prefixed "rdmagwctl: ", and returns the process exit status.
#include <cstdint>
#include <string>

#include "tools/rdmagwctl/admin_client.h"

namespace rdmagw::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the server answered an error, or could not be reached
inline constexpr int kExitUsage = 2;    // bad usage; for `check`: the config is invalid

struct CommandContext {
  AdminClient admin;
  bool json = false;  // print the server's JSON instead of tables
};

int run_status(const CommandContext& ctx);
int run_peers(const CommandContext& ctx);
int run_services(const CommandContext& ctx);
int run_config(const CommandContext& ctx);

struct StreamsOptions {
  int64_t limit = 0;  // 0: the server's default page size
  int64_t offset = 0;
  bool all = false;  // page through every stream
};
int run_streams(const CommandContext& ctx, const StreamsOptions& options);

struct TopOptions {
  double interval_seconds = 1;
  int64_t count = 0;  // frames to print; 0: until Ctrl-C
};
int run_top(const CommandContext& ctx, const TopOptions& options);

int run_reload(const CommandContext& ctx);
// GET /ready: 0 when 200, 1 otherwise (not ready, or unreachable).
int run_ready(const CommandContext& ctx);

struct DrainOptions {
  bool wait = false;
  double wait_timeout_seconds = 60;
};
int run_drain(const CommandContext& ctx, const DrainOptions& options);
// POST /undrain: accept new connections again.
int run_undrain(const CommandContext& ctx);

// Offline: needs no admin endpoint.
int run_check(const std::string& config_file, bool json);

// Prints "rdmagwctl: MESSAGE" on stderr, MESSAGE through terminal_text
// (terminal_text.h): errors quote the server (an HTTP reason, a body, a
// parse error's bytes), so they are escaped like every other answer.
void print_error(const std::string& message);

}  // namespace rdmagw::ctl
