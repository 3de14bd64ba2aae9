// SPDX-License-Identifier: Apache-2.0
// Who may ask the admin endpoint what (proxy/admin/admin_access.h).
#include "proxy/admin/admin_access.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/secret_keys.h"

using namespace rdmagw;
using namespace rdmagw::admin;

namespace {
const std::string kAdmin = "127.0.0.1:9901";
const std::string kToken(40, 't');

AccessRequest get(std::string_view path) { return AccessRequest{path, std::nullopt, std::nullopt, std::nullopt}; }
}  // namespace

TEST_CASE("admin access without a token: no Origin, and a Host that names the admin address") {
  CHECK(check_access(get("/stats"), nullptr, kAdmin).status == 0);
  AccessRequest r = get("/drain");
  r.origin = "http://evil.example";
  CHECK(check_access(r, nullptr, kAdmin).status == 403);
  r = get("/config");
  r.host = "evil.example:9901";
  AccessDecision d = check_access(r, nullptr, kAdmin);
  CHECK(d.status == 403);
  CHECK(d.reason.find("not this admin address") != std::string::npos);
  for (const char* ok : {"127.0.0.1:9901", "localhost:9901", "LocalHost:9901", "127.0.0.1", "localhost"}) {
    r.host = ok;
    INFO(ok);
    CHECK(check_access(r, nullptr, kAdmin).status == 0);
  }
  for (const char* bad : {"127.0.0.2:9901", "localhost.evil.example:9901", "127.0.0.1.nip.io", "[::1]:9901", ""}) {
    r.host = bad;
    INFO(bad);
    CHECK(check_access(r, nullptr, kAdmin).status == 403);
  }
  AccessRequest v6 = get("/stats");
  v6.host = "[::1]:9901";
  CHECK(check_access(v6, nullptr, "[::1]:9901").status == 0);
  // Probes: always.
  r = get("/ready");
  r.origin = "http://evil.example";
  r.host = "evil.example";
  CHECK(check_access(r, nullptr, kAdmin).status == 0);
  r.path = "/live";
  CHECK(check_access(r, nullptr, kAdmin).status == 0);
}

TEST_CASE("admin access with a token: Bearer TOKEN, exactly") {
  SecretKeys token;
  token.add(kToken);
  CHECK(check_access(get("/stats"), &token, kAdmin).status == 401);
  CHECK(check_access(get("/live"), &token, kAdmin).status == 0);
  CHECK(check_access(get("/ready"), &token, kAdmin).status == 0);
  AccessRequest r = get("/stats");
  for (std::string bad : {"Bearer " + kToken.substr(1), "Bearer " + kToken + "x", "Basic " + kToken, kToken,
                          "Bearer " + std::string(40, 'u'), std::string("Bearer ")}) {
    r.authorization = bad;
    INFO(bad);
    CHECK(check_access(r, &token, kAdmin).status == 401);
  }
  for (std::string good : {"Bearer " + kToken, "bearer " + kToken}) {
    r.authorization = good;
    CHECK(check_access(r, &token, kAdmin).status == 0);
  }
  // The token also lets a request with an Origin or any Host through.
  const std::string bearer = "Bearer " + kToken;  // outlives the string_view
  r.authorization = bearer;
  r.origin = "http://x";
  r.host = "anything";
  CHECK(check_access(r, &token, kAdmin).status == 0);
}

TEST_CASE("admin access: the stats page at / is guarded like the data it shows") {
  // A browser that loads it from the admin address sends no Origin on the
  // navigation nor on its same-origin GETs; a page of another site does.
  AccessRequest page = get("/");
  page.host = "127.0.0.1:9901";
  CHECK(check_access(page, nullptr, kAdmin).status == 0);
  page.origin = "http://evil.example";
  CHECK(check_access(page, nullptr, kAdmin).status == 403);
  page.origin.reset();
  page.host = "rebound.evil.example:9901";
  CHECK(check_access(page, nullptr, kAdmin).status == 403);
  SecretKeys token;
  token.add(kToken);
  CHECK(check_access(get("/"), &token, kAdmin).status == 401);
}
