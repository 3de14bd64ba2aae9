// SPDX-License-Identifier: Apache-2.0
#include "proxy/admin/admin_access.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cctype>

namespace rdmagw::admin {

namespace {

bool bearer_matches(std::string_view authorization, const SecretKeys& token) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(kScheme[i])))
      return false;
  std::string_view given = authorization.substr(kScheme.size());
  auto expected = token.key(0);
  // The length is no secret (it is at least 32 bytes); the bytes are.
  if (given.size() != expected.size()) return false;
  return CRYPTO_memcmp(given.data(), expected.data(), expected.size()) == 0;
}

bool same_host(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// "name:port" -> "name"; "[::1]:9901" -> "[::1]"; a name without a port as is.
std::string_view host_name(std::string_view host) {
  size_t colon = host.rfind(':');
  if (colon == std::string_view::npos || host.find(']', colon) != std::string_view::npos) return host;
  return host.substr(0, colon);
}

// The names a local client may use for the admin address: its IP as
// configured, and localhost. DNS rebinding needs a name of the attacker's,
// so the name is what is checked; the port says nothing about who asks.
bool names_admin(std::string_view host, std::string_view admin) {
  std::string_view name = host_name(host);
  return same_host(name, host_name(admin)) || same_host(name, "localhost");
}

}  // namespace

AccessDecision check_access(const AccessRequest& request, const SecretKeys* token, std::string_view admin) {
  if (request.path == "/live" || request.path == "/ready") return {};
  bool has_token = token && !token->empty();
  if (has_token) {
    if (request.authorization && bearer_matches(*request.authorization, *token)) return {};
    return {401, request.authorization ? "the admin token does not match\n"
                                       : "this admin endpoint needs Authorization: Bearer TOKEN (admin_token_file; "
                                         "rdmagwctl --token-file)\n"};
  }
  if (request.origin)
    return {403, "cross-origin requests are refused (a browser page may not drive the admin endpoint)\n"};
  if (request.host && !names_admin(*request.host, admin))
    return {403, "Host " + std::string(request.host->substr(0, 100)) + " is not this admin address (" +
                     std::string(admin) + ")\n"};
  return {};
}

}  // namespace rdmagw::admin
