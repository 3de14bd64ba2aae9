// SPDX-License-Identifier: Apache-2.0
#pragma once
// Aligned text tables (like `ss` or `ps`) and the human units their cells
// use: bytes in IEC units, rates, durations.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rdmagw::ctl {

enum class Align { kLeft, kRight };

struct Column {
  std::string header;
  Align align = Align::kLeft;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // Missing trailing cells print empty; extra cells are a bug and dropped.
  // Cells print as given: the views hand in text already through
  // terminal_text (views.h), so widths are those of the escaped text.
  void add_row(std::vector<std::string> cells);
  size_t row_count() const { return rows_.size(); }

  // The header line and one line per row, each ending in '\n'. Columns are
  // separated by two spaces, padded to the widest cell (in UTF-8 code
  // points, not bytes); lines carry no trailing spaces.
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Display width of UTF-8 text, counted in code points.
size_t display_width(std::string_view text);

// 0 B, 1023 B, 1.0 KiB, 1.2 MiB, 3.4 GiB ... (one decimal from KiB up).
std::string format_bytes(uint64_t bytes);
// format_bytes of a rate, with "/s": 0 B/s, 1.5 MiB/s.
std::string format_byte_rate(double bytes_per_second);
// An event rate: 0/s, 0.5/s, 12/s, 1.2k/s.
std::string format_count_rate(double per_second);
// 850ms, 12.5s, 3m05s, 2h03m, 4d03h.
std::string format_duration_ms(uint64_t milliseconds);
std::string format_duration_seconds(double seconds);
// A short latency: 41us, 1.25ms, 1.20s; "-" when negative (not measured).
std::string format_latency_us(double microseconds);

}  // namespace rdmagw::ctl
