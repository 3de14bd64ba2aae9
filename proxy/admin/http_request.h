// SPDX-License-Identifier: Apache-2.0
#pragma once
// The admin endpoint's HTTP/1.x request parser: what a client sends, read
// with hard limits and nothing allocated beyond them. A pure function of
// the bytes received so far, so that it is tested and fuzzed without
// sockets (tests/unit/http_request_test.cc, tests/fuzz/fuzz_admin.cc).
//
// Accepted: HTTP/1.0 and 1.1, origin-form targets ("/path?query"), a body
// only with Content-Length (read and ignored: no endpoint takes one).
// Refused with a status: a head over kMaxHeadBytes or kMaxHeaders lines
// (431), a body over kMaxBodyBytes (413), Transfer-Encoding (501), another
// version (505), and anything malformed, a repeated Host, Authorization,
// Content-Length or Origin included (400).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace rdmagw::admin {

inline constexpr size_t kMaxHeadBytes = 8 * 1024;  // request line and headers
inline constexpr size_t kMaxHeaders = 64;
inline constexpr size_t kMaxBodyBytes = 4 * 1024;

struct HttpRequest {
  std::string method;
  std::string path;   // before '?'
  std::string query;  // after '?', without it
  bool keep_alive = true;
  std::optional<std::string> host, authorization, origin;
  size_t body_length = 0;
};

struct HttpParse {
  enum class Status { kNeedMore, kRequest, kError };
  Status status = Status::kNeedMore;
  size_t consumed = 0;   // kRequest: bytes of the request, body included
  int error_status = 0;  // kError: the status to answer with (the connection then closes)
  std::string error;     // kError: why, for the answer's body
};

// Parses the request at the start of `bytes` into *out.
HttpParse parse_http_request(std::string_view bytes, HttpRequest* out);

}  // namespace rdmagw::admin
