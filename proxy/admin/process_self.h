// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the standard process_* metrics say of rdmagw itself, as every
// Prometheus client library exports them (start time, CPU, memory, file
// descriptors): read from /proc at each scrape, so that an rdmagw is
// watched with the same queries as any other process.
#include <cstdint>
#include <optional>
#include <string_view>

namespace rdmagw::admin {

struct ProcessSelf {
  double start_time_seconds = 0;  // since the epoch
  double cpu_seconds = 0;         // user + system
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;  // RLIMIT_NOFILE's soft limit
};

// Of this process; nullopt where /proc cannot be read.
std::optional<ProcessSelf> read_process_self();

// The parts, on the texts: /proc/PID/stat and /proc/stat's btime, with the
// clock tick and page size they are counted in.
std::optional<ProcessSelf> parse_process_stat(std::string_view stat, std::string_view proc_stat, long ticks_per_second,
                                              long page_size);

}  // namespace rdmagw::admin
