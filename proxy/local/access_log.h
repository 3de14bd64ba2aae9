// SPDX-License-Identifier: Apache-2.0
#pragma once
// The access log: one line per application connection when it ends (a
// client's connection to a listener, a connection to a target opened for a
// peer, a passthrough route's), as a proxy writes one per request. Into the
// process log as event=access, or into access_log.path, key=value or JSON.
// Rate bound per worker; what is left out is counted and said on the next
// line (docs/logging.md, "Access log").
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "common/log_limiter.h"
#include "common/metrics.h"
#include "config/config.h"

namespace rdmagw::local {

// access_log.path's file, shared by every worker. Its descriptor never
// changes once opened: another path (a reload) or the same one again
// (SIGUSR1, after logrotate moved the file) is opened and dup2()ed over it,
// so a worker writing meanwhile writes whole lines to the old file or the
// new. Each line is one write(2) with O_APPEND.
class AccessLogFile {
 public:
  AccessLogFile() = default;
  ~AccessLogFile();
  AccessLogFile(const AccessLogFile&) = delete;
  AccessLogFile& operator=(const AccessLogFile&) = delete;

  // Opens `path` (created 0640 if missing) and writes there from now on.
  // False with *error (the path and why), the previous file kept.
  bool open(const std::string& path, std::string* error);
  // Opens the same path again (SIGUSR1). False with *error, nothing open.
  bool reopen(std::string* error);
  std::string path() const;
  // Any thread.
  void write(std::string_view line) const;

 private:
  mutable std::mutex mu_;  // open/reopen against each other (main thread, admin thread)
  std::string path_;
  std::atomic<int> fd_{-1};
};

// How one application connection went.
struct AccessRecord {
  std::string_view direction;  // "outbound" (a listener's client) | "inbound" (to a target, for a peer) | "passthrough"
  std::string_view connection;  // its id (outbound: made here; inbound: the peer's), "" if none
  std::string_view listener;    // outbound, passthrough
  // The application's address: outbound, passthrough: this side's client;
  // inbound: the far side's, as the peer's OPEN said ("" if it did not).
  std::string_view client;
  std::string_view destination;  // transparent listeners: where the application meant to go (inbound: as told)
  std::string_view remote;       // inbound: the peer's end of the session
  std::string_view peer;
  std::string_view transport;  // "tcp" | "rdma": the session's at the end; "" without one
  std::string_view target;
  uint64_t bytes_from_app = 0;  // read from this side's application socket
  uint64_t bytes_to_app = 0;    // written to it
  std::string_view start;       // when it began (accept, or the peer's OPEN): utc_timestamp()
  uint64_t duration_us = 0;
  // Phases in microseconds from the start, -1 where not reached: waiting
  // for a session (outbound), connecting to the target (inbound, to its
  // success or failure), the first byte written to this side's application.
  int64_t session_wait_us = -1;
  int64_t connect_us = -1;
  int64_t first_byte_us = -1;
  bool reset = false;         // else: closed in both directions
  std::string_view ended_by;  // reset: "client" | "target" | "peer" | "tunnel" | "rdmagw"
  std::string_view reason;    // reset: why, as the stream_* line says it
};

// "2026-11-27T06:02:54.330Z" for `now`.
std::string utc_timestamp(std::chrono::system_clock::time_point now);
// One JSON object and a newline: {"time":..,"node":..,"worker":..,"event":"access",...}.
std::string access_json_line(const AccessRecord& r, std::string_view time, std::string_view node, unsigned worker,
                             uint64_t suppressed);

// A worker's access log: its settings (from the configuration, again on
// every reload), its rate bound, and its counters. Single-threaded.
class AccessLog {
 public:
  AccessLog(const AccessLogFile& file, metrics::WorkerMetrics& metrics, unsigned worker)
      : file_(file), metrics_(metrics), worker_(worker) {}
  void configure(const AccessLogConfig& config, std::string node);
  bool enabled() const { return config_.enabled; }
  void write(const AccessRecord& record);
  // The line of a connection, or a peer's stream, that ended before it was
  // carried (refused at accept, an OPEN refused): started now, end=reset,
  // by=rdmagw, with whatever else `record` says (its reason above all).
  void write_refused(AccessRecord record);

 private:
  const AccessLogFile& file_;
  metrics::WorkerMetrics& metrics_;
  unsigned worker_;
  AccessLogConfig config_;
  std::string node_;
  log::LogLimiter limiter_{1000, 1000};
};

}  // namespace rdmagw::local
