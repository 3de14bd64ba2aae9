// SPDX-License-Identifier: Apache-2.0
#include "tools/rdmagwctl/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace rdmagw::ctl {

namespace {

std::string printf_string(const char* format, double value) {
  char buf[64];
  snprintf(buf, sizeof(buf), format, value);
  return buf;
}

// Value scaled into the largest IEC unit that keeps it at or above 1,
// rounded to one decimal; rounding up to 1024.0 moves to the next unit.
std::string format_iec(double value, const char* suffix) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (std::round(value) < 1024) return printf_string("%.0f B", std::round(value)) + suffix;
  size_t unit = 0;
  value /= 1024;
  while (unit + 1 < std::size(kUnits) && std::round(value * 10) / 10 >= 1024) {
    value /= 1024;
    ++unit;
  }
  return printf_string("%.1f ", value) + kUnits[unit] + suffix;
}

}  // namespace

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

size_t display_width(std::string_view text) {
  size_t width = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++width;  // skip continuation bytes
  return width;
}

std::string Table::render() const {
  std::vector<size_t> widths(columns_.size());
  for (size_t i = 0; i < columns_.size(); ++i) {
    widths[i] = display_width(columns_[i].header);
    for (const auto& row : rows_) widths[i] = std::max(widths[i], display_width(row[i]));
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < columns_.size(); ++i) {
      size_t pad = widths[i] - display_width(cells[i]);
      if (i > 0) line += "  ";
      if (columns_[i].align == Align::kRight) line.append(pad, ' ');
      line += cells[i];
      if (columns_[i].align == Align::kLeft) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  std::vector<std::string> headers;
  for (const auto& c : columns_) headers.push_back(c.header);
  emit(headers);
  for (const auto& row : rows_) emit(row);
  return out;
}

std::string format_bytes(uint64_t bytes) { return format_iec(static_cast<double>(bytes), ""); }

std::string format_byte_rate(double bytes_per_second) { return format_iec(std::max(0.0, bytes_per_second), "/s"); }

std::string format_count_rate(double per_second) {
  per_second = std::max(0.0, per_second);
  if (per_second == 0) return "0/s";
  if (per_second < 10) return printf_string("%.1f/s", per_second);
  if (per_second < 1000) return printf_string("%.0f/s", per_second);
  if (per_second < 1e6) return printf_string("%.1fk/s", per_second / 1e3);
  return printf_string("%.1fM/s", per_second / 1e6);
}

std::string format_duration_ms(uint64_t ms) {
  char buf[64];
  if (ms < 1000) {
    snprintf(buf, sizeof(buf), "%llums", static_cast<unsigned long long>(ms));
  } else if (ms < 60'000) {
    // Tenths, truncated: 59.99 s must not print as "60.0s".
    snprintf(buf, sizeof(buf), "%llu.%llus", static_cast<unsigned long long>(ms / 1000),
             static_cast<unsigned long long>(ms % 1000 / 100));
  } else {
    uint64_t s = ms / 1000;
    unsigned long long days = s / 86400, hours = s / 3600 % 24, minutes = s / 60 % 60, seconds = s % 60;
    if (s < 3600)
      snprintf(buf, sizeof(buf), "%llum%02llus", minutes, seconds);
    else if (s < 86400)
      snprintf(buf, sizeof(buf), "%lluh%02llum", hours, minutes);
    else
      snprintf(buf, sizeof(buf), "%llud%02lluh", days, hours);
  }
  return buf;
}

std::string format_duration_seconds(double seconds) {
  if (!(seconds > 0)) return "0ms";
  // Clamped to a million days: a cast of an out-of-range double is undefined.
  return format_duration_ms(static_cast<uint64_t>(std::min(seconds, 86400e6) * 1000));
}

std::string format_latency_us(double us) {
  if (us < 0) return "-";
  if (us < 1000) return printf_string("%.0fus", us);
  if (us < 1e6) return printf_string("%.2fms", us / 1e3);
  return printf_string("%.2fs", us / 1e6);
}

}  // namespace rdmagw::ctl
