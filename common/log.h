// SPDX-License-Identifier: Apache-2.0
#pragma once
// One line per event on stderr, as key=value pairs so that both people and
// scripts can read it:  2026-11-22T12:00:00.123Z warn node=a worker=0 event=... peer=... reason=...
// Each line goes out in one write(2), so lines of different threads never interleave.
#include <cstdint>
#include <string>
#include <string_view>

namespace rdmagw::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_node(std::string_view node);
void set_level(Level level);
// "debug" | "info" | "warn" | "error"; false for anything else.
bool parse_level(std::string_view text, Level* level);
bool enabled(Level level);
// Worker index of the calling thread, printed on each line (-1: main thread).
void set_thread_worker(int worker);
// A value as a line shows it: as is, or in quotes with ", \, newlines,
// control bytes and invalid UTF-8 escaped (\", \\, \n, \xNN).
std::string format_value(std::string_view value);

class Line {
 public:
  Line(Level level, std::string_view event);
  ~Line();
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;

  Line& kv(std::string_view key, std::string_view value);
  Line& kv(std::string_view key, const char* value) { return kv(key, std::string_view(value)); }
  Line& kv(std::string_view key, const std::string& value) { return kv(key, std::string_view(value)); }
  Line& kv(std::string_view key, int64_t value);
  Line& kv(std::string_view key, uint64_t value);
  Line& kv(std::string_view key, int value) { return kv(key, static_cast<int64_t>(value)); }
  Line& kv(std::string_view key, unsigned value) { return kv(key, static_cast<uint64_t>(value)); }
  Line& kv(std::string_view key, long long value) { return kv(key, static_cast<int64_t>(value)); }
  Line& kv(std::string_view key, unsigned long long value) { return kv(key, static_cast<uint64_t>(value)); }

 private:
  bool active_;
  std::string text_;
};

inline Line debug(std::string_view event) { return Line(Level::kDebug, event); }
inline Line info(std::string_view event) { return Line(Level::kInfo, event); }
inline Line warn(std::string_view event) { return Line(Level::kWarn, event); }
inline Line error(std::string_view event) { return Line(Level::kError, event); }

}  // namespace rdmagw::log
