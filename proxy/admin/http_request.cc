// SPDX-License-Identifier: Apache-2.0
#include "proxy/admin/http_request.h"

#include <cctype>

namespace rdmagw::admin {
namespace {

HttpParse refuse(int status, std::string why) {
  HttpParse r;
  r.status = HttpParse::Status::kError;
  r.error_status = status;
  r.error = std::move(why);
  return r;
}

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// RFC 9110 "token" characters: method and header names.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (std::isalnum(c)) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) == std::string_view::npos) return false;
  }
  return true;
}

bool visible(std::string_view s, bool tab_ok) {
  for (unsigned char c : s)
    if ((c < 0x20 && !(tab_ok && c == '\t')) || c == 0x7f) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One header the request may carry once: a second is refused (two Hosts or
// two Authorizations make proxies and servers disagree about the request).
bool set_once(std::optional<std::string>* field, std::string_view value) {
  if (field->has_value()) return false;
  *field = std::string(value);
  return true;
}

}  // namespace

HttpParse parse_http_request(std::string_view bytes, HttpRequest* out) {
  size_t head_end = bytes.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    if (bytes.size() > kMaxHeadBytes) return refuse(431, "request head longer than 8192 bytes");
    return {};
  }
  if (head_end + 4 > kMaxHeadBytes) return refuse(431, "request head longer than 8192 bytes");
  std::string_view head = bytes.substr(0, head_end);
  *out = HttpRequest{};

  size_t line_end = head.find("\r\n");
  std::string_view line = head.substr(0, line_end);
  head = line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return refuse(400, "malformed request line");
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return refuse(400, "malformed method");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.starts_with("HTTP/")) return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
    return refuse(400, "malformed request line");
  }
  if (target.empty() || target.front() != '/' || !visible(target, false))
    return refuse(400, "the request target must be a path (\"/stats\")");
  bool http10 = version == "HTTP/1.0";
  out->method = std::string(method);
  size_t q = target.find('?');
  out->path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) out->query = std::string(target.substr(q + 1));
  out->keep_alive = !http10;

  size_t headers = 0;
  std::optional<std::string> content_length;
  while (!head.empty()) {
    line_end = head.find("\r\n");
    line = head.substr(0, line_end);
    head = line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
    if (++headers > kMaxHeaders) return refuse(431, "more than 64 header lines");
    if (!line.empty() && (line.front() == ' ' || line.front() == '\t'))
      return refuse(400, "folded header lines are not accepted");
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return refuse(400, "malformed header line");
    std::string_view name = line.substr(0, colon);
    std::string_view value = trim(line.substr(colon + 1));
    if (!visible(value, true)) return refuse(400, "control characters in a header");
    bool once = true;
    if (same_name(name, "Host"))
      once = set_once(&out->host, value);
    else if (same_name(name, "Authorization"))
      once = set_once(&out->authorization, value);
    else if (same_name(name, "Origin"))
      once = set_once(&out->origin, value);
    else if (same_name(name, "Content-Length"))
      once = set_once(&content_length, value);
    else if (same_name(name, "Transfer-Encoding"))
      return refuse(501, "Transfer-Encoding is not accepted");
    else if (same_name(name, "Connection")) {
      // A comma-separated list of options.
      for (size_t at = 0; at <= value.size();) {
        size_t comma = value.find(',', at);
        std::string_view option = trim(value.substr(at, comma == std::string_view::npos ? comma : comma - at));
        if (same_name(option, "close")) out->keep_alive = false;
        if (same_name(option, "keep-alive") && http10) out->keep_alive = true;
        if (comma == std::string_view::npos) break;
        at = comma + 1;
      }
    }
    if (!once) return refuse(400, "the " + std::string(name) + " header appears twice");
  }
  if (content_length) {
    const std::string& text = *content_length;
    if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
      return refuse(400, "malformed Content-Length");
    out->body_length = std::stoul(text);
    if (out->body_length > kMaxBodyBytes) return refuse(413, "request body longer than 4096 bytes");
  }
  size_t total = head_end + 4 + out->body_length;
  if (bytes.size() < total) return {};
  HttpParse r;
  r.status = HttpParse::Status::kRequest;
  r.consumed = total;
  return r;
}

}  // namespace rdmagw::admin
