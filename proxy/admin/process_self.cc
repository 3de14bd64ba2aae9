// SPDX-License-Identifier: Apache-2.0
#include "proxy/admin/process_self.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace rdmagw::admin {
namespace {

std::optional<std::string> read_text(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool to_number(std::string_view text, uint64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc{} && ptr == text.data() + text.size();
}

}  // namespace

std::optional<ProcessSelf> parse_process_stat(std::string_view stat, std::string_view proc_stat, long ticks_per_second,
                                              long page_size) {
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so
  // the fields are counted from the last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string_view::npos || ticks_per_second <= 0 || page_size <= 0) return std::nullopt;
  std::vector<std::string_view> fields;  // fields[0] is STATE, field 3 of proc(5)
  std::string_view rest = stat.substr(close + 1);
  while (!rest.empty()) {
    size_t start = rest.find_first_not_of(" \n");
    if (start == std::string_view::npos) break;
    size_t end = rest.find_first_of(" \n", start);
    fields.push_back(rest.substr(start, end - start));
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
  }
  // proc(5) numbers fields from 1: utime 14, stime 15, starttime 22, vsize 23, rss 24.
  auto field = [&](size_t number, uint64_t* out) {
    return fields.size() > number - 3 && to_number(fields[number - 3], out);
  };
  uint64_t utime = 0, stime = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &start_ticks) || !field(23, &vsize) ||
      !field(24, &rss_pages))
    return std::nullopt;
  uint64_t boot_time = 0;
  size_t at = proc_stat.find("\nbtime ");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view btime = proc_stat.substr(at + 7);
  btime = btime.substr(0, btime.find('\n'));
  if (!to_number(btime, &boot_time)) return std::nullopt;
  ProcessSelf self;
  const double tick = static_cast<double>(ticks_per_second);
  self.cpu_seconds = static_cast<double>(utime + stime) / tick;
  self.start_time_seconds = static_cast<double>(boot_time) + static_cast<double>(start_ticks) / tick;
  self.virtual_bytes = vsize;
  self.resident_bytes = rss_pages * static_cast<uint64_t>(page_size);
  return self;
}

std::optional<ProcessSelf> read_process_self() {
  std::optional<std::string> stat = read_text("/proc/self/stat");
  std::optional<std::string> proc_stat = read_text("/proc/stat");
  if (!stat || !proc_stat) return std::nullopt;
  std::optional<ProcessSelf> self =
      parse_process_stat(*stat, *proc_stat, ::sysconf(_SC_CLK_TCK), ::sysconf(_SC_PAGESIZE));
  if (!self) return std::nullopt;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
    ++self->open_fds;
  if (self->open_fds > 0) --self->open_fds;  // the iterator's own
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) self->max_fds = limit.rlim_cur;
  return self;
}

}  // namespace rdmagw::admin
