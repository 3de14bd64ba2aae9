// SPDX-License-Identifier: Apache-2.0
#pragma once
// Who may ask the admin endpoint what (docs/admin.md, "Access"):
//
// - /live and /ready answer anyone: probes and health checks ask them, and
//   they say nothing an attacker could use.
// - With admin_token_file, every other request must carry
//   `Authorization: Bearer TOKEN` (compared in constant time), or gets 401.
// - Without a token (a loopback admin address only), a browser must not be
//   a way in: a page on any site can make it send a "simple" cross-origin
//   POST (no preflight) or, through DNS rebinding, reach 127.0.0.1 under its
//   own host name. Requests that carry an Origin header, or a Host header
//   that is not the admin address, are refused (403). Command-line clients
//   send neither.
#include <optional>
#include <string>
#include <string_view>

#include "common/secret_keys.h"

namespace rdmagw::admin {

struct AccessRequest {
  std::string_view path;
  std::optional<std::string_view> authorization;  // the headers, when present
  std::optional<std::string_view> origin;
  std::optional<std::string_view> host;
};

struct AccessDecision {
  int status = 0;  // 0: allowed; else 401 or 403
  std::string reason;
};

// `token`: the admin token, or null; `admin`: the configured admin address
// ("127.0.0.1:9901", "[::1]:9901"), which the Host header must name.
AccessDecision check_access(const AccessRequest& request, const SecretKeys* token, std::string_view admin);

}  // namespace rdmagw::admin
