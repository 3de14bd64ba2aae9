// SPDX-License-Identifier: Apache-2.0
#include "config/services_file.h"

#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <string>

#include "test_support.h"

using rdmagw::EndpointState;
using rdmagw::parse_services_file;
using rdmagw::ServiceTable;
using rdmagw::test::ipv4;

namespace {

// An address as the table holds it, from either family's text.
rdmagw::services_table::AddressRecord at(const char* text) {
  rdmagw::services_table::AddressRecord a{};
  REQUIRE(rdmagw::service_address::parse(text, &a));
  return a;
}

// A file as rdmagw-k8s writes it (tests/kube checks the agent's side).
const char* kFile = R"({
 "format": "rdmagw-services/1",
 "api": {"reachable": true, "since": "2026-11-28T01:00:00Z"},
 "services": [
  {"namespace": "default", "name": "redis", "cluster_ips": ["10.96.0.10"],
   "ports": [{"port": 6379, "endpoints": [
     {"address": "10.0.1.1", "port": 6380, "state": "ready", "node": "n1", "pod": "redis-0", "rdmagw": true},
     {"address": "10.0.1.2", "port": 6380, "state": "not-ready", "node": "n2", "pod": "redis-1", "rdmagw": false},
     {"address": "10.0.1.3", "port": 6380, "state": "terminating", "pod": "redis-2", "rdmagw": true},
     {"address": "10.0.1.4", "port": 6380, "state": "ready", "rdmagw": false}]}]},
  {"namespace": "db", "name": "pg", "cluster_ips": [], "future_field": {"ignored": [1, 2]},
   "ports": [{"name": "sql", "port": 5432, "endpoints": [
     {"address": "10.0.2.1", "port": 5432, "state": "ready", "rdmagw": true}]}]}
 ]
})";

std::string refused(const std::string& text) {
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  INFO(text);
  CHECK_FALSE(parse_services_file(text, &table, &error));
  CHECK(table == nullptr);
  return error;
}

std::string with_endpoint(const std::string& endpoint) {
  return R"({"format": "rdmagw-services/1", "api": {"reachable": true},
    "services": [{"namespace": "a", "name": "b", "cluster_ips": ["10.96.0.1"],
    "ports": [{"port": 80, "endpoints": [)" +
         endpoint + "]}]}]}";
}

}  // namespace

TEST_CASE("a ClusterIP and port find the Service port, with its ready endpoints listed apart") {
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  REQUIRE(parse_services_file(kFile, &table, &error));
  CHECK(table->api().reachable);
  CHECK(table->api().since == "2026-11-28T01:00:00Z");
  CHECK(table->services().size() == 2);
  CHECK(table->endpoint_count() == 5);

  const ServiceTable::Port* redis = table->find_cluster_ip(at("10.96.0.10"), 6379);
  REQUIRE(redis != nullptr);
  CHECK(table->service_name(*redis) == "default/redis");
  auto endpoints = table->endpoints(*redis);
  REQUIRE(endpoints.size() == 4);
  REQUIRE(table->ready_count(*redis) == 2);
  CHECK(rdmagw::service_address::ipv4(table->ready(*redis, 0).address) == ipv4("10.0.1.1"));
  CHECK(rdmagw::service_address::ipv4(table->ready(*redis, 1).address) == ipv4("10.0.1.4"));
  CHECK(endpoints[0].port == 6380);
  CHECK(ServiceTable::has_rdmagw(endpoints[0]));
  CHECK(table->text(endpoints[0].pod) == "redis-0");
  CHECK(ServiceTable::state(endpoints[1]) == EndpointState::kNotReady);
  CHECK(ServiceTable::state(endpoints[2]) == EndpointState::kTerminating);
  CHECK(table->node_name(endpoints[3]).empty());

  CHECK(table->find_cluster_ip(at("10.96.0.10"), 6380) == nullptr);
  CHECK(table->find_cluster_ip(at("10.96.0.11"), 6379) == nullptr);
}

TEST_CASE("an endpoint's address and target port find it, as a headless Service's clients dial it") {
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  REQUIRE(parse_services_file(kFile, &table, &error));
  auto pg = table->find_endpoint(at("10.0.2.1"), 5432);
  REQUIRE(pg.endpoint != nullptr);
  CHECK(table->service_name(*pg.port) == "db/pg");
  CHECK(table->text(pg.port->name) == "sql");
  CHECK(ServiceTable::state(*pg.endpoint) == EndpointState::kReady);
  CHECK(ServiceTable::has_rdmagw(*pg.endpoint));
  // A headless Service has no ClusterIP to find it by.
  CHECK(table->cluster_ips(table->services()[1]).empty());
  CHECK(table->find_endpoint(at("10.0.2.1"), 5433).endpoint == nullptr);
  auto terminating = table->find_endpoint(at("10.0.1.3"), 6380);
  REQUIRE(terminating.endpoint != nullptr);
  CHECK(ServiceTable::state(*terminating.endpoint) == EndpointState::kTerminating);
}

TEST_CASE("an unreachable API server is read as the agent wrote it") {
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  REQUIRE(parse_services_file(
      R"({"format": "rdmagw-services/1", "services": [],
          "api": {"reachable": false, "since": "2026-11-28T01:02:03Z", "error": "dial tcp: connection refused"}})",
      &table, &error));
  CHECK_FALSE(table->api().reachable);
  CHECK(table->api().error == "dial tcp: connection refused");
  CHECK(table->services().empty());

  // A long error (a not-ready server quotes its check list) is cut, not
  // refused, and never inside a character ("é" is two bytes).
  std::string long_error = std::string(1023, 'x') + "\u00e9" + std::string(3000, 'y');
  REQUIRE(parse_services_file(R"({"format": "rdmagw-services/1", "services": [],
          "api": {"reachable": false, "error": ")" +
                                  long_error + R"("}})",
                              &table, &error));
  CHECK(table->api().error == std::string(1023, 'x') + "...");
}

TEST_CASE("a malformed services file is refused, naming the field and why") {
  CHECK(refused("").rfind("not JSON: ", 0) == 0);
  CHECK(refused("{\"format\": ").rfind("not JSON: ", 0) == 0);
  CHECK(refused("[]") == "(top): not an object");
  CHECK(refused(R"({"api": {"reachable": true}, "services": []})") == "format: missing");
  CHECK(refused(R"({"format": "rdmagw-services/2", "api": {"reachable": true}, "services": []})") ==
        "format: \"rdmagw-services/2\", not \"rdmagw-services/1\" (another agent version?)");
  CHECK(refused(R"({"format": "rdmagw-services/1", "services": []})") == "api: missing");
  CHECK(refused(R"({"format": "rdmagw-services/1", "api": {"reachable": "yes"}, "services": []})") ==
        "api.reachable: not true or false");
  CHECK(refused(R"({"format": "rdmagw-services/1", "api": {"reachable": true}, "services": {}})") ==
        "services: not a list");
  CHECK(refused(R"({"format": "rdmagw-services/1", "api": {"reachable": true},
                    "services": [{"namespace": "a", "name": "b", "cluster_ips": ["fd00::g"], "ports": []}]})") ==
        "services[0].cluster_ips[0]: not an IPv4 or IPv6 address");
  CHECK(refused(with_endpoint(R"({"address": "10.0.0.1", "port": 0, "state": "ready", "rdmagw": true})")) ==
        "services[0].ports[0].endpoints[0].port: not a port (an integer from 1 to 65535)");
  CHECK(refused(with_endpoint(R"({"address": "10.0.0.1", "port": 80, "state": "serving", "rdmagw": true})")) ==
        "services[0].ports[0].endpoints[0].state: \"serving\", not ready, terminating or not-ready");
  CHECK(refused(with_endpoint(R"({"address": "10.0.0.1", "port": 80, "state": "ready"})")) ==
        "services[0].ports[0].endpoints[0].rdmagw: missing");
  CHECK(refused(with_endpoint(R"({"address": "10.0.0.300", "port": 80, "state": "ready", "rdmagw": true})")) ==
        "services[0].ports[0].endpoints[0].address: not an IPv4 or IPv6 address");
  CHECK(refused(with_endpoint(R"({"address": "10.0.0.1", "port": 80, "state": "ready", "rdmagw": true,
                                  "pod": ")" +
                              std::string(254, 'p') + R"("})")) ==
        "services[0].ports[0].endpoints[0].pod: longer than 253 bytes");
}

TEST_CASE("two Services claiming one ClusterIP and port are refused, naming both") {
  const std::string twice = R"({"format": "rdmagw-services/1", "api": {"reachable": true}, "services": [
    {"namespace": "a", "name": "one", "cluster_ips": ["10.96.0.5"], "ports": [{"port": 80, "endpoints": []}]},
    {"namespace": "a", "name": "two", "cluster_ips": ["10.96.0.5"], "ports": [{"port": 80, "endpoints": []}]}]})";
  CHECK(refused(twice) == "services[1].ports[0]: 10.96.0.5:80 already belongs to a/one");
  const std::string same_port_twice = R"({"format": "rdmagw-services/1", "api": {"reachable": true}, "services": [
    {"namespace": "a", "name": "one", "cluster_ips": ["10.96.0.5"],
     "ports": [{"port": 80, "endpoints": []}, {"port": 80, "endpoints": []}]}]})";
  CHECK(refused(same_port_twice) == "services[0].ports[1]: 10.96.0.5:80 already belongs to a/one");
}

TEST_CASE("a services file larger than the bound is refused unread") {
  std::string big(rdmagw::kMaxServicesFileBytes + 1, ' ');
  CHECK(refused(big) == "larger than 67108864 bytes");
}

TEST_CASE("an address no Service or pod holds refuses the file: connections would land on this host") {
  const std::pair<const char*, const char*> cases[] = {
      {"127.0.0.1", "127.0.0.1 is loopback"},
      {"127.9.9.9", "127.9.9.9 is loopback"},
      {"0.0.0.0", "0.0.0.0 is unspecified (0.0.0.0/8)"},
      {"0.1.2.3", "0.1.2.3 is unspecified (0.0.0.0/8)"},
      {"169.254.169.254", "169.254.169.254 is link-local (169.254.0.0/16)"},
      {"224.0.0.251", "224.0.0.251 is multicast (224.0.0.0/4)"},
      {"255.255.255.255", "255.255.255.255 is broadcast"},
      {"::ffff:127.0.0.1", "::ffff:127.0.0.1 is loopback"},  // judged as the IPv4 address it holds
      {"::", ":: is unspecified (::)"},
      {"::1", "::1 is loopback (::1)"},
      {"fe80::1", "fe80::1 is link-local (fe80::/10)"},
      {"febf::1", "febf::1 is link-local (fe80::/10)"},
      {"ff02::1", "ff02::1 is multicast (ff00::/8)"},
  };
  for (const auto& [address, says] : cases) {
    INFO(address);
    std::string endpoint =
        std::string(R"({"address": ")") + address + R"(", "port": 9901, "state": "ready", "rdmagw": false})";
    CHECK(refused(with_endpoint(endpoint)) == "services[0].ports[0].endpoints[0].address: " + std::string(says) +
                                                  ": not an address a Service or pod holds");
    std::string cluster_ip = std::string(R"({"format": "rdmagw-services/1", "api": {"reachable": true},
      "services": [{"namespace": "a", "name": "b", "cluster_ips": [")") +
                             address + R"("], "ports": []}]})";
    CHECK(refused(cluster_ip).rfind("services[0].cluster_ips[0]: " + std::string(says), 0) == 0);
  }
  // The edges of each range are endpoints like any other.
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  for (const char* fine : {"1.0.0.0", "126.255.255.255", "128.0.0.0", "169.253.255.255", "223.255.255.255", "::2",
                           "fec0::1", "fe7f::1", "feff::1", "fd00::1", "2001:db8::1"}) {
    INFO(fine);
    CHECK(parse_services_file(
        with_endpoint(std::string(R"({"address": ")") + fine + R"(", "port": 80, "state": "ready", "rdmagw": false})"),
        &table, &error));
  }
}

TEST_CASE("a name with a control byte refuses the file: names reach operators' terminals") {
  CHECK(refused(with_endpoint(
            R"({"address": "10.0.0.1", "port": 80, "state": "ready", "rdmagw": true, "pod": "p\u001b]0;x\u0007"})")) ==
        "services[0].ports[0].endpoints[0].pod: holds a control byte: not a Kubernetes name");
  CHECK(refused(R"({"format": "rdmagw-services/1", "api": {"reachable": true},
                    "services": [{"namespace": "a\r", "name": "b", "cluster_ips": [], "ports": []}]})") ==
        "services[0].namespace: holds a control byte: not a Kubernetes name");
  // The agent's own words about the API server are free text: a control
  // byte in them becomes a space (a table holds none).
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  REQUIRE(parse_services_file(R"({"format": "rdmagw-services/1",
      "api": {"reachable": false, "error": "x\u001b[2J"}, "services": []})",
                              &table, &error));
  CHECK(table->api().error == "x [2J");
}

TEST_CASE("nodes with a node-mode rdmagw are read with their tunnel address, each once") {
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  REQUIRE(parse_services_file(R"({"format": "rdmagw-services/1", "api": {"reachable": true},
      "nodes": [{"name": "node-b", "tunnel": "10.0.0.2"}],
      "services": [{"namespace": "default", "name": "web", "cluster_ips": ["10.96.0.20"], "ports": [
        {"name": "http", "port": 80, "endpoints": [
          {"address": "10.0.3.1", "port": 8080, "state": "ready", "rdmagw": false, "pod": "web-0", "node": "node-b"},
          {"address": "10.0.3.2", "port": 8080, "state": "ready", "rdmagw": false, "pod": "web-1", "node": "node-c"}]}]}]})",
                              &table, &error));
  INFO(error);
  auto on_b = table->find_endpoint(at("10.0.3.1"), 8080);
  auto on_c = table->find_endpoint(at("10.0.3.2"), 8080);
  REQUIRE(on_b.endpoint);
  REQUIRE(on_c.endpoint);
  REQUIRE(table->node_tunnel(*on_b.endpoint));
  CHECK(rdmagw::service_address::ipv4(*table->node_tunnel(*on_b.endpoint)) == ipv4("10.0.0.2"));
  CHECK(table->node_name(*on_c.endpoint) == "node-c");
  CHECK(table->node_tunnel(*on_c.endpoint) == nullptr);

  const std::string head = R"({"format": "rdmagw-services/1", "api": {"reachable": true}, "services": [], "nodes": )";
  CHECK(refused(head + "{}}") == "nodes: not a list");
  CHECK(refused(head + R"([{"name": "n", "tunnel": "127.0.0.1"}]})") ==
        "nodes[0].tunnel: 127.0.0.1 is loopback: not an address a Service or pod holds");
  CHECK(refused(head + R"([{"name": "n"}]})") == "nodes[0].tunnel: missing");
  CHECK(refused(head + R"([{"name": "", "tunnel": "10.0.0.2"}]})") == "nodes[0].name: empty");
  CHECK(refused(head + R"([{"name": "n", "tunnel": "10.0.0.2"}, {"name": "n", "tunnel": "10.0.0.3"}]})") ==
        "nodes[1]: node n is listed twice");
}

TEST_CASE("IPv6 and dual-stack Services are read like IPv4 ones") {
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  REQUIRE(parse_services_file(R"({"format": "rdmagw-services/1", "api": {"reachable": true},
      "nodes": [{"name": "n6", "tunnel": "fd00:77::1"}],
      "services": [{"namespace": "default", "name": "dual", "cluster_ips": ["10.96.0.20", "fd00:96::20"], "ports": [
        {"port": 80, "endpoints": [
          {"address": "10.0.3.1", "port": 8080, "state": "ready", "rdmagw": true},
          {"address": "fd00:10::1", "port": 8080, "state": "ready", "rdmagw": false, "node": "n6"},
          {"address": "::ffff:10.0.3.2", "port": 8080, "state": "ready", "rdmagw": false}]}]}]})",
                              &table, &error));
  INFO(error);
  const ServiceTable::Port* by_v4 = table->find_cluster_ip(at("10.96.0.20"), 80);
  const ServiceTable::Port* by_v6 = table->find_cluster_ip(at("fd00:96::20"), 80);
  REQUIRE(by_v4);
  CHECK(by_v4 == by_v6);
  CHECK(table->ready_count(*by_v4) == 3);
  auto e = table->find_endpoint(at("fd00:10::1"), 8080);
  REQUIRE(e.endpoint);
  CHECK(rdmagw::service_address::text(e.endpoint->address) == "fd00:10::1");
  REQUIRE(table->node_tunnel(*e.endpoint));
  CHECK(rdmagw::service_address::text(*table->node_tunnel(*e.endpoint)) == "fd00:77::1");
  // A v4-mapped address is the IPv4 one: found by either.
  CHECK(table->find_endpoint(at("10.0.3.2"), 8080).endpoint != nullptr);
  CHECK(table->find_endpoint(at("::ffff:10.0.3.2"), 8080).endpoint != nullptr);
  CHECK(rdmagw::service_address::text(table->find_endpoint(at("10.0.3.2"), 8080).endpoint->address) == "10.0.3.2");
}
