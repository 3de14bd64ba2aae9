// SPDX-License-Identifier: Apache-2.0
#pragma once
// Parsing an HTTP/1.x response from the bytes read so far, apart from any
// socket, so that its framing can be tested on plain strings. Only what
// rdmagw's admin server sends: a status line, headers, a body of
// Content-Length bytes.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rdmagw::ctl {

struct HttpResponse {
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order
  std::string body;

  // The first header of that name (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
};

enum class ParseStatus {
  kIncomplete,  // need more bytes
  kComplete,
  kInvalid,  // *error says why
};

// `raw` is everything received so far; `at_eof` tells whether the server has
// closed (before the whole body: an error).
ParseStatus parse_http_response(std::string_view raw, bool at_eof, HttpResponse* out, std::string* error);

}  // namespace rdmagw::ctl
