// SPDX-License-Identifier: Apache-2.0
#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "common/utf8.h"

namespace rdmagw::log {

namespace {
std::string g_node = "-";
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
thread_local int t_worker = -1;

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "?";
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// Values with spaces, quotes or anything a terminal would act on are quoted
// and escaped, so that the line stays one parseable line and a value a peer
// chose (its node name, a target) cannot move the cursor, ring the bell or
// forge a line: control bytes and bytes of invalid UTF-8 are written \xNN.
void append_value(std::string& out, std::string_view value) {
  bool plain = !value.empty();
  for (size_t i = 0; i < value.size() && plain; ++i) {
    auto c = static_cast<unsigned char>(value[i]);
    plain = c != ' ' && c != '"' && c != '=' && c != '\\' && !is_control(c) && c < 0x80;
  }
  if (plain) {
    out.append(value);
    return;
  }
  out.push_back('"');
  for (size_t i = 0; i < value.size(); ++i) {
    auto c = static_cast<unsigned char>(value[i]);
    if (c >= 0x80) {
      size_t n = utf8_sequence_length(value, i);
      if (n > 0) {
        out.append(value.substr(i, n));
        i += n - 1;
        continue;
      }
    }
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out.append("\\n");
    } else if (is_control(c) || c >= 0x80) {
      char hex[5];
      snprintf(hex, sizeof(hex), "\\x%02x", c);
      out.append(hex);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
}
}  // namespace

std::string format_value(std::string_view value) {
  std::string out;
  append_value(out, value);
  return out;
}

void set_node(std::string_view node) { g_node = std::string(node); }
void set_level(Level level) { g_level.store(static_cast<int>(level)); }

bool parse_level(std::string_view text, Level* level) {
  if (text == "debug")
    *level = Level::kDebug;
  else if (text == "info")
    *level = Level::kInfo;
  else if (text == "warn")
    *level = Level::kWarn;
  else if (text == "error")
    *level = Level::kError;
  else
    return false;
  return true;
}
bool enabled(Level level) { return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed); }
void set_thread_worker(int worker) { t_worker = worker; }

Line::Line(Level level, std::string_view event) : active_(enabled(level)) {
  if (!active_) return;
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm utc;
  gmtime_r(&tv.tv_sec, &utc);
  char stamp[64];
  snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ ", utc.tm_year + 1900, utc.tm_mon + 1,
           utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  text_.reserve(160);
  text_.append(stamp);
  text_.append(level_name(level));
  text_.append(" node=");
  append_value(text_, g_node);
  if (t_worker >= 0) {
    text_.append(" worker=");
    text_.append(std::to_string(t_worker));
  }
  text_.append(" event=");
  append_value(text_, event);
}

Line::~Line() {
  if (!active_) return;
  text_.push_back('\n');
  // One write keeps concurrent lines whole; a short write to stderr is ignored.
  ssize_t ignored = ::write(STDERR_FILENO, text_.data(), text_.size());
  (void)ignored;
}

Line& Line::kv(std::string_view key, std::string_view value) {
  if (!active_) return *this;
  text_.push_back(' ');
  text_.append(key);
  text_.push_back('=');
  append_value(text_, value);
  return *this;
}

Line& Line::kv(std::string_view key, int64_t value) {
  if (active_) kv(key, std::string_view(std::to_string(value)));
  return *this;
}

Line& Line::kv(std::string_view key, uint64_t value) {
  if (active_) kv(key, std::string_view(std::to_string(value)));
  return *this;
}

}  // namespace rdmagw::log
