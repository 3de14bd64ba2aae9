// SPDX-License-Identifier: Apache-2.0
#include "tools/rdmagwctl/http_response.h"

#include <charconv>
#include <cstdint>
#include <optional>

namespace rdmagw::ctl {

namespace {

// Headers larger than this mean the other end is not an admin endpoint.
constexpr size_t kMaxHeaderBytes = 64 * 1024;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The next line of `raw` from *pos, without its "\n" or "\r\n"; nullopt when
// no full line has arrived yet. Servers should send CRLF; a bare LF is
// accepted as well since nothing is lost by it.
std::optional<std::string_view> next_line(std::string_view raw, size_t* pos) {
  size_t nl = raw.find('\n', *pos);
  if (nl == std::string_view::npos) return std::nullopt;
  std::string_view line = raw.substr(*pos, nl - *pos);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  *pos = nl + 1;
  return line;
}

bool parse_status_line(std::string_view line, HttpResponse* out, std::string* error) {
  // HTTP/1.1 200 OK
  if (!line.starts_with("HTTP/1.") || line.size() < 12 || line[8] != ' ') {
    *error = "not an HTTP/1.x status line: '" + std::string(line.substr(0, 80)) + "'";
    return false;
  }
  std::string_view code = line.substr(9, 3);
  auto [end, ec] = std::from_chars(code.data(), code.data() + code.size(), out->status);
  if (ec != std::errc() || end != code.data() + code.size() || out->status < 100 || out->status > 999 ||
      (line.size() > 12 && line[12] != ' ')) {
    *error = "bad status code in '" + std::string(line.substr(0, 80)) + "'";
    return false;
  }
  out->reason = line.size() > 13 ? std::string(line.substr(13)) : "";
  return true;
}

}  // namespace

const std::string* HttpResponse::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (iequals(key, name)) return &value;
  return nullptr;
}

ParseStatus parse_http_response(std::string_view raw, bool at_eof, HttpResponse* out, std::string* error) {
  *out = HttpResponse{};
  size_t pos = 0;
  auto status_line = next_line(raw, &pos);
  bool headers_done = false;
  if (status_line) {
    if (!parse_status_line(*status_line, out, error)) return ParseStatus::kInvalid;
    while (auto line = next_line(raw, &pos)) {
      if (line->empty()) {
        headers_done = true;
        break;
      }
      size_t colon = line->find(':');
      if (colon == std::string_view::npos || colon == 0) {
        *error = "malformed header line '" + std::string(line->substr(0, 80)) + "'";
        return ParseStatus::kInvalid;
      }
      out->headers.emplace_back(std::string(trim(line->substr(0, colon))), std::string(trim(line->substr(colon + 1))));
    }
  }
  if (!headers_done) {
    if (at_eof) {
      *error = raw.empty() ? "connection closed without an answer" : "connection closed in the middle of the headers";
      return ParseStatus::kInvalid;
    }
    if (raw.size() > kMaxHeaderBytes) {
      *error = "headers longer than " + std::to_string(kMaxHeaderBytes) + " bytes";
      return ParseStatus::kInvalid;
    }
    return ParseStatus::kIncomplete;
  }

  // rdmagw's admin server frames every answer by Content-Length (and never
  // sends 1xx, 204 or 304): that is all this client speaks, so a body framed
  // otherwise means the other end is not an rdmagw admin endpoint.
  if (out->header("Transfer-Encoding")) {
    *error = "Transfer-Encoding '" + *out->header("Transfer-Encoding") +
             "' in the answer (rdmagw's admin server sends Content-Length)";
    return ParseStatus::kInvalid;
  }
  const std::string* length_text = out->header("Content-Length");
  if (!length_text) {
    *error = "no Content-Length in the answer (rdmagw's admin server always sends one)";
    return ParseStatus::kInvalid;
  }
  {
    std::string_view text = *length_text;
    uint64_t length = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), length);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      *error = "bad Content-Length '" + *length_text + "'";
      return ParseStatus::kInvalid;
    }
    size_t have = raw.size() - pos;
    if (have < length) {
      if (!at_eof) return ParseStatus::kIncomplete;
      *error = "connection closed after " + std::to_string(have) + " of " + std::to_string(length) + " body bytes";
      return ParseStatus::kInvalid;
    }
    out->body = std::string(raw.substr(pos, length));
    return ParseStatus::kComplete;
  }
}

}  // namespace rdmagw::ctl
