// SPDX-License-Identifier: Apache-2.0
// The choice among a Service's endpoints (proxy/runtime/service_router.h):
// only ready ones for a ClusterIP, the client's own for an endpoint
// address, the less loaded of two, and counts that follow connections.
#include "proxy/runtime/service_router.h"

#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

using rdmagw::ServiceRouter;
using rdmagw::ServiceTable;
using Kind = ServiceRouter::Choice::Kind;

namespace {

const char* kFile = R"({
 "format": "rdmagw-services/1",
 "api": {"reachable": true},
 "services": [
  {"namespace": "default", "name": "echo", "cluster_ips": ["10.96.0.10"],
   "ports": [{"port": 80, "endpoints": [
     {"address": "10.0.0.1", "port": 8000, "state": "ready", "rdmagw": true},
     {"address": "10.0.0.2", "port": 8000, "state": "ready", "rdmagw": true},
     {"address": "10.0.0.3", "port": 8000, "state": "ready", "rdmagw": false},
     {"address": "10.0.0.4", "port": 8000, "state": "not-ready", "rdmagw": true},
     {"address": "10.0.0.5", "port": 8000, "state": "terminating", "rdmagw": true}]},
    {"port": 81, "endpoints": [
     {"address": "10.0.0.4", "port": 8001, "state": "not-ready", "rdmagw": true}]}]}
 ]
})";

std::shared_ptr<const ServiceTable> table(const char* text) {
  std::shared_ptr<const ServiceTable> out;
  std::string error;
  REQUIRE(rdmagw::parse_services_file(text, &out, &error));
  return out;
}

// IPv4 text as a sockaddr_in, IPv6 text as a sockaddr_in6.
sockaddr_storage address(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    return ss;
  }
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  REQUIRE(inet_pton(AF_INET, ip, &in->sin_addr) == 1);
  return ss;
}

rdmagw::AddressPort key(const char* ip, uint16_t port) {
  sockaddr_storage ss = address(ip, port);
  rdmagw::AddressPort k;
  REQUIRE(rdmagw::service_address::from_sockaddr(reinterpret_cast<const sockaddr*>(&ss), &k.address, &k.port));
  return k;
}

ServiceRouter::Choice choose(ServiceRouter& router, const char* ip, uint16_t port) {
  sockaddr_storage ss = address(ip, port);
  return router.choose(reinterpret_cast<const sockaddr*>(&ss));
}

std::string chosen(const ServiceRouter::Choice& c) {
  REQUIRE(c.kind == Kind::kEndpoint);
  return rdmagw::service_address::text(c.endpoint->address) + ":" + std::to_string(c.endpoint->port);
}

}  // namespace

TEST_CASE("service router: a ClusterIP goes to ready endpoints only, spread over all of them") {
  ServiceRouter router;
  CHECK(choose(router, "10.96.0.10", 80).kind == Kind::kUnknown);  // no table yet
  router.set_table(table(kFile));
  std::map<std::string, int> picks;
  for (int i = 0; i < 300; ++i) ++picks[chosen(choose(router, "10.96.0.10", 80))];  // each released at once
  CHECK(picks.size() == 3);
  CHECK(picks.count("10.0.0.4:8000") == 0);
  CHECK(picks.count("10.0.0.5:8000") == 0);
  for (const auto& [endpoint, n] : picks) CHECK(n >= 50);  // 100 each expected

  CHECK(choose(router, "10.96.0.10", 81).kind == Kind::kNoEndpoint);
  CHECK(choose(router, "10.96.0.10", 82).kind == Kind::kUnknown);
  CHECK(choose(router, "10.96.0.11", 80).kind == Kind::kUnknown);
}

TEST_CASE("service router: the less loaded of two wins, and counts follow the connections") {
  ServiceRouter router;
  router.set_table(table(kFile));
  // 20 connections held to 10.0.0.1 (its address dialled, as a headless
  // Service's client does: the same count).
  std::vector<ServiceRouter::Choice> held;
  for (int i = 0; i < 20; ++i) held.push_back(choose(router, "10.0.0.1", 8000));
  // Any two picked include one less loaded than 10.0.0.1 as long as the
  // other two hold fewer than 20: it gets none of the next 30.
  std::map<std::string, int> load;
  for (int i = 0; i < 30; ++i) {
    held.push_back(choose(router, "10.96.0.10", 80));
    ++load[chosen(held.back())];
  }
  CHECK(load.count("10.0.0.1:8000") == 0);
  CHECK(load["10.0.0.2:8000"] + load["10.0.0.3:8000"] == 30);

  ServiceRouter::OpenCounts open;
  router.count_open(&open);
  CHECK(open.size() == 3);
  CHECK(open[key("10.0.0.1", 8000)] == 20);

  // A new table keeps the counts of connections still open.
  router.set_table(table(kFile));
  held.resize(15);
  open.clear();
  router.count_open(&open);
  CHECK(open.size() == 1);
  CHECK(open[key("10.0.0.1", 8000)] == 15);
  held.clear();
  open.clear();
  router.count_open(&open);
  CHECK(open.empty());
}

TEST_CASE("service router: an endpoint's own address goes to it, whatever its state") {
  ServiceRouter router;
  router.set_table(table(kFile));
  CHECK(chosen(choose(router, "10.0.0.4", 8000)) == "10.0.0.4:8000");
  CHECK(chosen(choose(router, "10.0.0.5", 8000)) == "10.0.0.5:8000");
  auto c = choose(router, "10.0.0.3", 8000);
  CHECK(chosen(c) == "10.0.0.3:8000");
  CHECK_FALSE(ServiceTable::has_rdmagw(*c.endpoint));
  CHECK(choose(router, "10.0.0.3", 8001).kind == Kind::kUnknown);
  router.set_table(nullptr);
  CHECK(choose(router, "10.0.0.3", 8000).kind == Kind::kUnknown);
}

TEST_CASE("service router: IPv6 and dual-stack Services, and a v4-mapped destination as the IPv4 one") {
  ServiceRouter router;
  router.set_table(table(R"({"format": "rdmagw-services/1", "api": {"reachable": true}, "services": [
    {"namespace": "default", "name": "dual", "cluster_ips": ["10.96.0.20", "fd00:96::20"],
     "ports": [{"port": 80, "endpoints": [
       {"address": "fd00:10::1", "port": 8080, "state": "ready", "rdmagw": false}]}]}]})"));
  for (const char* cluster_ip : {"10.96.0.20", "fd00:96::20", "::ffff:10.96.0.20"}) {
    auto c = choose(router, cluster_ip, 80);
    INFO(cluster_ip);
    CHECK(chosen(c) == "fd00:10::1:8080");
    CHECK(c.address.ss_family == AF_INET6);
    CHECK(c.address_len == sizeof(sockaddr_in6));
    CHECK(ntohs(reinterpret_cast<const sockaddr_in6&>(c.address).sin6_port) == 8080);
  }
  CHECK(choose(router, "fd00:96::21", 80).kind == Kind::kUnknown);
  auto direct = choose(router, "fd00:10::1", 8080);  // the endpoint itself (headless)
  CHECK(chosen(direct) == "fd00:10::1:8080");
  ServiceRouter::OpenCounts open;
  router.count_open(&open);
  CHECK(open[key("fd00:10::1", 8080)] == 1);

  // An IPv4 endpoint is dialled as AF_INET.
  router.set_table(table(kFile));
  auto v4 = choose(router, "10.0.0.1", 8000);
  CHECK(v4.address.ss_family == AF_INET);
  CHECK(v4.address_len == sizeof(sockaddr_in));
}
