// SPDX-License-Identifier: Apache-2.0
#pragma once
// A blocking HTTP/1.1 client for one request per connection
// (`Connection: close`), bounded by a timeout: enough to talk to the admin
// endpoint, nothing more (no TLS, redirects or keep-alive).
#include <string>
#include <string_view>

#include "tools/rdmagwctl/http_response.h"

namespace rdmagw::ctl {

struct HostPort {
  std::string host;  // name or address, without IPv6 brackets
  std::string port;  // decimal, 1..65535
  // As the user should see it: "127.0.0.1:9901", "[::1]:9901".
  std::string display() const;
};

// "HOST:PORT", "[IPv6]:PORT"; an "http://" prefix and a trailing "/" are
// tolerated. False with *error set otherwise.
bool parse_host_port(std::string_view text, HostPort* out, std::string* error);

struct HttpRequest {
  std::string method = "GET";
  std::string target = "/";  // path and query
  std::string body;          // sent with Content-Length (also when empty, for POST)
  std::string bearer_token;  // sent as Authorization: Bearer ... when not empty
};

struct HttpFailure {
  enum class Stage {
    kConnect,   // resolving or connecting failed: the endpoint is unreachable
    kExchange,  // connected, but sending or receiving failed or timed out
    kProtocol,  // the answer is not HTTP we understand
  };
  Stage stage = Stage::kConnect;
  std::string reason;  // "Connection refused", "timed out after 5s", ...
};

// Connects (trying each resolved address in turn), sends `request`, reads
// the whole response. `timeout_seconds` bounds the connect and, again,
// sending plus receiving the answer.
bool http_exchange(const HostPort& server, const HttpRequest& request, double timeout_seconds, HttpResponse* response,
                   HttpFailure* failure);

}  // namespace rdmagw::ctl
