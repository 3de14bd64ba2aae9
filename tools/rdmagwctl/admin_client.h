// SPDX-License-Identifier: Apache-2.0
#pragma once
// The admin endpoint as rdmagwctl's commands see it: requests by path, JSON
// answers, and failures already worded for the user ("cannot reach admin at
// 127.0.0.1:9901: Connection refused").
#include <string>
#include <string_view>
#include <utility>

#include "tools/rdmagwctl/http_client.h"
#include "tools/rdmagwctl/json.h"

namespace rdmagw::ctl {

class AdminClient {
 public:
  // `token`: the admin token (admin_token_file), sent with every request; empty: none.
  AdminClient(HostPort address, double timeout_seconds, std::string token = {})
      : address_(std::move(address)), timeout_seconds_(timeout_seconds), token_(std::move(token)) {}

  const HostPort& address() const { return address_; }

  // Sends the request and returns whatever HTTP status came back; false
  // (with *error) only when no HTTP answer arrived.
  bool send(const HttpRequest& request, HttpResponse* response, std::string* error) const;

  // GET `target`, expecting 2xx and a JSON body. *raw_body (optional) gets
  // the body as sent, for --json.
  bool get_json(std::string_view target, Json* out, std::string* error, std::string* raw_body = nullptr) const;

  // The body of a JSON answer of any status; false with *error when it is
  // not JSON (the message names the request).
  bool parse_answer(const HttpRequest& request, const HttpResponse& response, Json* out, std::string* error) const;

  // "admin at ADDR answered GET /x with 404 Not Found: <first line of body>"
  std::string describe_http_error(const HttpRequest& request, const HttpResponse& response) const;

 private:
  HostPort address_;
  double timeout_seconds_;
  std::string token_;
};

}  // namespace rdmagw::ctl
