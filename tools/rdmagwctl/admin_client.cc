// SPDX-License-Identifier: Apache-2.0
#include "tools/rdmagwctl/admin_client.h"

namespace rdmagw::ctl {

namespace {

std::string what(const HttpRequest& request) { return request.method + " " + request.target; }

// The first line of an error body, shortened: enough to say why without
// pasting a whole page into a terminal.
std::string summary_of(std::string_view body) {
  size_t nl = body.find('\n');
  std::string line(body.substr(0, nl));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return line;
}

}  // namespace

bool AdminClient::send(const HttpRequest& request, HttpResponse* response, std::string* error) const {
  HttpFailure failure;
  HttpRequest sent = request;
  sent.bearer_token = token_;
  if (http_exchange(address_, sent, timeout_seconds_, response, &failure)) return true;
  switch (failure.stage) {
    case HttpFailure::Stage::kConnect:
      // Most often nothing listens there: rdmagw is not running, or its
      // admin: is elsewhere and this was not told (the default is tried).
      *error = "cannot reach admin at " + address_.display() + ": " + failure.reason +
               " (is rdmagw running, with admin: at this address? Another address: --admin HOST:PORT or "
               "RDMAGW_ADMIN)";
      break;
    case HttpFailure::Stage::kExchange:
      *error = "admin at " + address_.display() + " did not answer " + what(request) + ": " + failure.reason;
      break;
    case HttpFailure::Stage::kProtocol:
      *error = "bad answer from admin at " + address_.display() + " to " + what(request) + ": " + failure.reason;
      break;
  }
  return false;
}

std::string AdminClient::describe_http_error(const HttpRequest& request, const HttpResponse& response) const {
  std::string out =
      "admin at " + address_.display() + " answered " + what(request) + " with " + std::to_string(response.status);
  if (!response.reason.empty()) out += " " + response.reason;
  std::string body = summary_of(response.body);
  if (!body.empty()) out += ": " + body;
  return out;
}

bool AdminClient::parse_answer(const HttpRequest& request, const HttpResponse& response, Json* out,
                               std::string* error) const {
  std::string json_error;
  auto parsed = parse_json(response.body, &json_error);
  if (!parsed) {
    *error = "admin at " + address_.display() + " sent invalid JSON for " + what(request) + ": " + json_error;
    return false;
  }
  *out = std::move(*parsed);
  return true;
}

bool AdminClient::get_json(std::string_view target, Json* out, std::string* error, std::string* raw_body) const {
  HttpRequest request;
  request.target = std::string(target);
  HttpResponse response;
  if (!send(request, &response, error)) return false;
  if (response.status < 200 || response.status > 299) {
    *error = describe_http_error(request, response);
    return false;
  }
  if (raw_body) *raw_body = response.body;
  return parse_answer(request, response, out, error);
}

}  // namespace rdmagw::ctl
