// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the admin endpoint answers to a request, apart from HTTP transport:
// the route table of docs/admin.md, query parameters, status codes and
// bodies. AdminServer feeds it parsed requests; tests can call it directly.
#include <string>
#include <string_view>

#include "proxy/admin/admin_model.h"

namespace rdmagw::admin {

struct Response {
  int status = 200;
  std::string content_type;
  std::string body;
  std::string allow;  // the Allow header of a 405 answer; empty otherwise
  // More header lines, each "Name: value\r\n"; static text (the stats
  // page's security policy), so a view is enough.
  std::string_view headers;
};

inline constexpr std::string_view kJsonContentType = "application/json";
inline constexpr std::string_view kTextContentType = "text/plain; charset=utf-8";
inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4";
inline constexpr std::string_view kHtmlContentType = "text/html; charset=utf-8";

// /streams paging (docs/admin.md).
inline constexpr size_t kDefaultStreamsLimit = 100;
inline constexpr size_t kMaxStreamsLimit = 10000;

// `method` is the request method's name ("GET"), `path` the request path
// without the query, `query` what follows '?' ("" if nothing). HEAD is
// answered as GET (the server leaves the body out). Never throws: an
// exception from the backend becomes a 500 answer.
Response handle_request(Backend& backend, std::string_view method, std::string_view path, std::string_view query);

}  // namespace rdmagw::admin
