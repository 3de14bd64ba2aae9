// SPDX-License-Identifier: Apache-2.0
#include "proxy/admin/json_writer.h"

#include <charconv>
#include <cmath>

namespace rdmagw::admin {

void append_json_double(std::string* out, double value) {
  if (!std::isfinite(value)) {
    out->append("null");
    return;
  }
  // Fixed notation reads best for the values rdmagw reports (seconds,
  // Unix times); outside this range it would be long runs of zeros.
  const double magnitude = std::fabs(value);
  const bool fixed = magnitude == 0 || (magnitude >= 1e-6 && magnitude < 1e17);
  char buf[64];
  auto result = fixed ? std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::fixed)
                      : std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  out->append(buf, result.ptr);
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (scope_is_empty_.empty()) return;  // the top-level value
  if (!scope_is_empty_.back()) out_.push_back(',');
  scope_is_empty_.back() = false;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_.push_back('{');
  scope_is_empty_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  out_.push_back('}');
  scope_is_empty_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_.push_back('[');
  scope_is_empty_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  out_.push_back(']');
  scope_is_empty_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  before_value();
  append_json_string(&out_, name);
  out_.push_back(':');
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value();
  append_json_string(&out_, text);
  return *this;
}

JsonWriter& JsonWriter::value(bool b) {
  before_value();
  out_.append(b ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  before_value();
  append_json_double(&out_, number);
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_.append("null");
  return *this;
}

JsonWriter& JsonWriter::string_array(std::string_view name, const std::vector<std::string>& items) {
  key(name).begin_array();
  for (const auto& item : items) value(item);
  return end_array();
}

}  // namespace rdmagw::admin
