// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/json_string.h"
#include "common/log.h"

namespace rdmagw::local {

AccessLogFile::~AccessLogFile() {
  int fd = fd_.exchange(-1);
  if (fd >= 0) ::close(fd);
}

bool AccessLogFile::open(const std::string& path, std::string* error) {
  std::lock_guard lock(mu_);
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
  if (fd < 0) {
    *error = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  int current = fd_.load();
  if (current < 0) {
    fd_.store(fd);
  } else {
    // The descriptor the workers write to now refers to the new file.
    if (::dup2(fd, current) < 0) {
      *error = "cannot switch to " + path + ": " + strerror(errno);
      ::close(fd);
      return false;
    }
    ::close(fd);
  }
  path_ = path;
  return true;
}

bool AccessLogFile::reopen(std::string* error) {
  std::string path;
  {
    std::lock_guard lock(mu_);
    path = path_;
  }
  if (path.empty()) {
    *error = "no access_log.path to reopen";
    return false;
  }
  return open(path, error);
}

std::string AccessLogFile::path() const {
  std::lock_guard lock(mu_);
  return path_;
}

void AccessLogFile::write(std::string_view line) const {
  int fd = fd_.load();
  if (fd < 0) return;
  // One write(2) with O_APPEND: lines of different workers never mix. A
  // failed or short write (a full disk) loses this line, never the stream.
  ssize_t ignored = ::write(fd, line.data(), line.size());
  (void)ignored;
}

std::string utc_timestamp(std::chrono::system_clock::time_point now) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  time_t seconds = static_cast<time_t>(ms / 1000);
  tm t{};
  gmtime_r(&seconds, &t);
  char buf[96];  // room for any int the format may print (the compiler checks)
  snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
           t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

namespace {

void json_field(std::string* out, std::string_view key, std::string_view value) {
  out->push_back(',');
  append_json_string(out, key);
  out->push_back(':');
  append_json_string(out, value);
}

void json_field(std::string* out, std::string_view key, uint64_t value) {
  out->push_back(',');
  append_json_string(out, key);
  out->push_back(':');
  *out += std::to_string(value);
}

// The fields both formats carry, in the same order; empty ones left out.
template <class Field>
void for_each_field(const AccessRecord& r, Field&& field) {
  field("direction", r.direction);
  if (!r.connection.empty()) field("connection", r.connection);
  if (!r.start.empty()) field("start", r.start);
  if (!r.listener.empty()) field("listener", r.listener);
  if (!r.client.empty()) field("client", r.client);
  if (!r.destination.empty()) field("destination", r.destination);
  if (!r.remote.empty()) field("remote", r.remote);
  if (!r.peer.empty()) field("peer", r.peer);
  if (!r.transport.empty()) field("transport", r.transport);
  if (!r.target.empty()) field("target", r.target);
  field("bytes_from_app", r.bytes_from_app);
  field("bytes_to_app", r.bytes_to_app);
  field("duration_ms", r.duration_us / 1000);
  field("duration_us", r.duration_us);
  if (r.session_wait_us >= 0) field("session_wait_us", static_cast<uint64_t>(r.session_wait_us));
  if (r.connect_us >= 0) field("connect_us", static_cast<uint64_t>(r.connect_us));
  if (r.first_byte_us >= 0) field("first_byte_us", static_cast<uint64_t>(r.first_byte_us));
  field("end", std::string_view(r.reset ? "reset" : "close"));
  if (r.reset) {
    field("by", r.ended_by);
    if (!r.reason.empty()) field("reason", r.reason);
  }
}

}  // namespace

std::string access_json_line(const AccessRecord& r, std::string_view time, std::string_view node, unsigned worker,
                             uint64_t suppressed) {
  std::string out = "{";
  append_json_string(&out, "time");
  out.push_back(':');
  append_json_string(&out, time);
  json_field(&out, "node", node);
  json_field(&out, "worker", worker);
  json_field(&out, "event", "access");
  for_each_field(r, [&](std::string_view key, const auto& value) { json_field(&out, key, value); });
  if (suppressed) json_field(&out, "suppressed", suppressed);
  out += "}\n";
  return out;
}

void AccessLog::configure(const AccessLogConfig& config, std::string node) {
  if (config.lines_per_second != config_.lines_per_second)
    limiter_ = log::LogLimiter(config.lines_per_second, config.lines_per_second);
  config_ = config;
  node_ = std::move(node);
}

void AccessLog::write_refused(AccessRecord record) {
  if (!enabled()) return;
  std::string start = utc_timestamp(std::chrono::system_clock::now());
  record.start = start;
  record.reset = true;
  record.ended_by = "rdmagw";
  write(record);
}

void AccessLog::write(const AccessRecord& r) {
  if (!config_.enabled) return;
  uint64_t suppressed = 0;
  if (!limiter_.allow(log::LogLimiter::Clock::now(), &suppressed)) {
    metrics_.access_log_suppressed.add();
    return;
  }
  metrics_.access_log_lines.add();
  if (config_.path.empty()) {
    log::Line line = log::info("access");
    for_each_field(r, [&](std::string_view key, const auto& value) { line.kv(key, value); });
    if (suppressed) line.kv("suppressed", suppressed);
    return;
  }
  std::string time = utc_timestamp(std::chrono::system_clock::now());
  if (config_.json) {
    file_.write(access_json_line(r, time, node_, worker_, suppressed));
    return;
  }
  // key=value as the process log writes it, without the level.
  std::string out = time + " node=" + log::format_value(node_) + " worker=" + std::to_string(worker_) + " event=access";
  auto add = [&](std::string_view key, const auto& value) {
    out += ' ';
    out += key;
    out += '=';
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, uint64_t>)
      out += std::to_string(value);
    else
      out += log::format_value(value);
  };
  for_each_field(r, add);
  if (suppressed) add("suppressed", suppressed);
  out += '\n';
  file_.write(out);
}

}  // namespace rdmagw::local
