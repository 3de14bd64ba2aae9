// SPDX-License-Identifier: Apache-2.0
#pragma once
// Parsing an HTTP/1.x response from the bytes read so far, apart from any
// socket, so that framing (Content-Length, chunked, close-delimited) can be
// tested on plain strings.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rdmagw::ctl {

struct HttpResponse {
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order
  std::string body;                                          // de-chunked

  // The first header of that name (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
};

enum class ParseStatus {
  kIncomplete,  // need more bytes
  kComplete,
  kInvalid,  // *error says why
};

// `raw` is everything received so far; `at_eof` tells whether the server has
// closed, which completes a response without Content-Length or chunking.
ParseStatus parse_http_response(std::string_view raw, bool at_eof, HttpResponse* out, std::string* error);

}  // namespace rdmagw::ctl
