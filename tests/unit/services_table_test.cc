// SPDX-License-Identifier: Apache-2.0
// The services table (config/services_table.h): what the builder writes is
// found again in place, and bytes that do not hold together are refused,
// naming the part at fault, however they were changed (the checksum made
// to match again, as a writer with the agent's uid could).
#include "config/services_table.h"

#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "common/crc32c.h"
#include "config/services_table_builder.h"
#include "test_support.h"

using namespace rdmagw;
using namespace rdmagw::services_table;
using rdmagw::test::ipv4;

namespace {

// An address as the table holds it, from either family's text.
AddressRecord a(const char* text) {
  AddressRecord out{};
  REQUIRE(service_address::parse(text, &out));
  return out;
}

std::shared_ptr<OwnedTableBytes> sample() {
  ServiceTableBuilder b;
  std::string error;
  b.set_api(false, "2026-11-29T10:00:00Z", "Get \"https://api/readyz\":\x1b[2J refused");
  b.add_service("default", "redis", {a("10.96.0.10"), a("10.96.0.11")});
  REQUIRE(b.add_port("redis", 6379, &error));
  b.add_endpoint(a("10.0.1.1"), 6380, EndpointState::kReady, true, "redis-0", "node-a");
  b.add_endpoint(a("10.0.1.2"), 6380, EndpointState::kNotReady, false, "redis-1", "node-b");
  b.add_endpoint(a("10.0.1.3"), 6380, EndpointState::kReady, false, "redis-2", "node-a");
  REQUIRE(b.add_port("", 26379, &error));
  b.add_endpoint(a("10.0.1.1"), 26379, EndpointState::kTerminating, true, "redis-0", "node-a");
  b.add_service("db", "pg", {});  // headless
  REQUIRE(b.add_port("sql", 5432, &error));
  b.add_endpoint(a("10.0.2.1"), 5432, EndpointState::kReady, true, "pg-0", "node-\xc3\xa9");
  b.add_service("empty", "none", {a("10.96.0.12")});
  REQUIRE(b.add_node_tunnel("node-b", a("10.0.0.2"), &error));  // node-b runs a node-mode rdmagw
  return b.finish();
}

std::shared_ptr<const ServiceTable> open_ok(std::shared_ptr<const TableBytes> bytes) {
  std::string error;
  auto table = ServiceTable::open(std::move(bytes), &error);
  INFO(error);
  REQUIRE(table);
  return table;
}

// The checksum made to match what the bytes are now.
void reseal(OwnedTableBytes& bytes) {
  uint32_t sum = crc32c(bytes.data() + kChecksummedFrom, bytes.size() - kChecksummedFrom);
  std::memcpy(bytes.data() + offsetof(Header, checksum), &sum, sizeof(sum));
}

// A copy of the sample with `change` made to its bytes and resealed: the
// reason it is refused ("" when it is not).
template <typename Change>
std::string refused(Change change) {
  auto bytes = sample();
  change(bytes->data(), *reinterpret_cast<Header*>(bytes->data()));
  reseal(*bytes);
  std::string error;
  return ServiceTable::open(bytes, &error) ? std::string() : error;
}

template <typename T>
T* record(uint8_t* base, const Header& h, SectionIndex which, size_t i) {
  return reinterpret_cast<T*>(base + h.sections[which].offset) + i;
}

}  // namespace

TEST_CASE("crc32c is CRC-32C (Castagnoli) as everyone computes it") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  // Lengths around the 8-byte steps, against the byte-at-a-time definition.
  std::string text = "The services table's checksum, at every length.";
  for (size_t n = 0; n <= text.size(); ++n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= static_cast<uint8_t>(text[i]);
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    CHECK(crc32c(text.data(), n) == ~c);
  }
  // Long inputs take three interleaved CRCs, combined: against the
  // definition at lengths that split evenly and not.
  std::string data(100003, '\0');
  uint32_t x = 12345;
  for (char& ch : data) ch = static_cast<char>((x = x * 1103515245 + 12345) >> 16);
  for (size_t n : {4095, 4096, 4097, 4103, 5000, 12345, 65536, 100003}) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= static_cast<uint8_t>(data[i]);
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    INFO(n);
    CHECK(crc32c(data.data(), n) == ~c);
  }
}

TEST_CASE("a built table is found again in place: Services, ports, endpoints, ready lists, names") {
  auto table = open_ok(sample());
  CHECK(table->services().size() == 3);
  CHECK(table->ports().size() == 3);
  CHECK(table->endpoint_count() == 5);
  ServiceTable::Api api = table->api();
  CHECK_FALSE(api.reachable);
  CHECK(api.since == "2026-11-29T10:00:00Z");
  CHECK(api.error == "Get \"https://api/readyz\": [2J refused");  // the control byte made a space

  for (const char* cluster_ip : {"10.96.0.10", "10.96.0.11"}) {
    const ServiceTable::Port* redis = table->find_cluster_ip(a(cluster_ip), 6379);
    REQUIRE(redis);
    CHECK(table->service_name(*redis) == "default/redis");
    CHECK(table->text(redis->name) == "redis");
    REQUIRE(table->ready_count(*redis) == 2);
    CHECK(rdmagw::service_address::ipv4(table->ready(*redis, 0).address) == ipv4("10.0.1.1"));
    CHECK(rdmagw::service_address::ipv4(table->ready(*redis, 1).address) == ipv4("10.0.1.3"));
  }
  const ServiceTable::Port* sentinel = table->find_cluster_ip(a("10.96.0.10"), 26379);
  REQUIRE(sentinel);
  CHECK(table->text(sentinel->name).empty());
  CHECK(table->ready_count(*sentinel) == 0);
  CHECK(table->find_cluster_ip(a("10.96.0.10"), 5432) == nullptr);
  CHECK(table->find_cluster_ip(a("10.96.0.12"), 80) == nullptr);  // a Service without ports

  // By endpoint: the first port listing the address answers.
  auto e = table->find_endpoint(a("10.0.1.1"), 6380);
  REQUIRE(e.endpoint);
  CHECK(e.port == table->find_cluster_ip(a("10.96.0.10"), 6379));
  CHECK(ServiceTable::has_rdmagw(*e.endpoint));
  CHECK(table->text(e.endpoint->pod) == "redis-0");
  CHECK(table->node_name(*e.endpoint) == "node-a");
  auto terminating = table->find_endpoint(a("10.0.1.1"), 26379);
  REQUIRE(terminating.endpoint);
  CHECK(ServiceTable::state(*terminating.endpoint) == EndpointState::kTerminating);
  auto pg = table->find_endpoint(a("10.0.2.1"), 5432);
  REQUIRE(pg.endpoint);
  CHECK(table->service_name(*pg.port) == "db/pg");
  CHECK(table->node_name(*pg.endpoint) == "node-\xc3\xa9");
  CHECK(table->cluster_ips(table->services()[1]).empty());
  CHECK(table->find_endpoint(a("10.0.2.1"), 5433).endpoint == nullptr);
  CHECK(table->find_endpoint(a("10.0.9.9"), 5432).endpoint == nullptr);

  // Nodes: each once, whether or not a node-mode rdmagw runs there.
  REQUIRE(table->nodes().size() == 3);  // node-a, node-b, node-é
  auto redis1 = table->find_endpoint(a("10.0.1.2"), 6380);
  REQUIRE(redis1.endpoint);
  CHECK(table->node_name(*redis1.endpoint) == "node-b");
  const AddressRecord* tunnel = table->node_tunnel(*redis1.endpoint);
  REQUIRE(tunnel);
  CHECK(rdmagw::service_address::ipv4(*tunnel) == ipv4("10.0.0.2"));
  CHECK(table->node_tunnel(*e.endpoint) == nullptr);  // node-a has none
  CHECK(table->node(*e.endpoint) == table->node(*table->find_endpoint(a("10.0.1.3"), 6380).endpoint));
}

TEST_CASE("an endpoint without a node names none; a node's tunnel is declared once") {
  ServiceTableBuilder b;
  std::string error;
  b.add_service("default", "web", {a("10.96.0.20")});
  REQUIRE(b.add_port("http", 80, &error));
  b.add_endpoint(a("10.0.3.1"), 8080, EndpointState::kReady, false, "", "");
  REQUIRE(b.add_node_tunnel("node-c", a("10.0.0.3"), &error));
  CHECK_FALSE(b.add_node_tunnel("node-c", a("10.0.0.4"), &error));
  CHECK(error == "node node-c is listed twice");
  auto table = open_ok(b.finish());
  const auto& e = table->endpoints(table->ports()[0])[0];
  CHECK(e.node == kNoNode);
  CHECK(table->node(e) == nullptr);
  CHECK(table->node_name(e).empty());
  CHECK(table->node_tunnel(e) == nullptr);
  REQUIRE(table->nodes().size() == 1);  // listed with its tunnel though no endpoint names it
  CHECK(table->text(table->nodes()[0].name) == "node-c");
}

TEST_CASE("an empty table is a table") {
  ServiceTableBuilder b;
  b.set_api(true, "", "");
  auto table = open_ok(b.finish());
  CHECK(table->services().empty());
  CHECK(table->find_cluster_ip(a("10.96.0.10"), 80) == nullptr);
  CHECK(table->find_endpoint(a("10.0.0.1"), 80).endpoint == nullptr);
  CHECK(table->api().reachable);
}

TEST_CASE("a ClusterIP and port that two Services claim is refused by the builder, naming the first") {
  ServiceTableBuilder b;
  std::string error;
  b.add_service("a", "one", {a("10.96.0.5")});
  REQUIRE(b.add_port("", 80, &error));
  b.add_service("a", "two", {a("10.96.0.5")});
  CHECK_FALSE(b.add_port("", 80, &error));
  CHECK(error == "10.96.0.5:80 already belongs to a/one");
  CHECK(b.add_port("", 81, &error));
}

TEST_CASE("a table cut short, at any length, or changed after it was written, is refused") {
  auto whole = sample();
  std::string error;
  for (size_t n = 0; n < whole->size(); n += (n < 200 ? 1 : 37)) {
    auto cut = std::make_shared<OwnedTableBytes>(n);
    std::memcpy(cut->data(), whole->data(), n);
    CHECK_FALSE(ServiceTable::open(cut, &error));
  }
  // A flipped bit anywhere after the checksum field: the checksum says so.
  for (size_t i = kChecksummedFrom; i < whole->size(); i += 5) {
    auto copy = std::make_shared<OwnedTableBytes>(whole->size());
    std::memcpy(copy->data(), whole->data(), whole->size());
    copy->data()[i] ^= 0x10;
    CHECK_FALSE(ServiceTable::open(copy, &error));
  }
  CHECK(refused([](uint8_t*, Header& h) { h.file_bytes += 8; }).find("cut short, or written in place") !=
        std::string::npos);
}

TEST_CASE("bytes that do not hold together are refused even with a checksum that matches") {
  CHECK(refused([](uint8_t*, Header&) {}).empty());
  CHECK(refused([](uint8_t*, Header& h) { h.magic[0] = 'X'; }).rfind("not a services table", 0) == 0);
  CHECK(refused([](uint8_t*, Header& h) { h.version = 1; }) == "table version 1, not 2 (another agent version?)");
  CHECK(refused([](uint8_t*, Header& h) { h.sections[kEndpoints].count += 1000; }).rfind("section endpoints", 0) == 0);
  CHECK(refused([](uint8_t*, Header& h) { h.sections[kPorts].offset += 4; }).rfind("section ports", 0) == 0);
  CHECK(refused([](uint8_t*, Header& h) { h.api_error.length = 1u << 30; }) ==
        "api.error: text outside the strings section");
  CHECK(refused([](uint8_t* b, Header& h) {
          record<EndpointRecord>(b, h, kEndpoints, 1)->pod = {h.sections[kStrings].count, 1};
        }) == "endpoints[1].pod: text outside the strings section");
  CHECK(refused([](uint8_t* b, Header& h) { b[h.sections[kStrings].offset] = '\n'; }) ==
        "strings: a control byte at 0: no name or text here has one");
  CHECK(refused([](uint8_t* b, Header& h) { record<ServiceRecord>(b, h, kServices, 0)->port_count = 3; }) ==
        "ports[2]: names a Service other than its own");
  CHECK(refused([](uint8_t* b, Header& h) { record<ServiceRecord>(b, h, kServices, 1)->first_port = 0; }) ==
        "services[1]: its ports are not the ones after the previous Service's");
  CHECK(refused([](uint8_t* b, Header& h) { record<PortRecord>(b, h, kPorts, 0)->endpoint_count = 99; }) ==
        "ports[0]: its endpoints are not the ones after the previous port's");
  CHECK(refused([](uint8_t* b, Header& h) { record<PortRecord>(b, h, kPorts, 1)->service = 0xFFFFFFFF; }) ==
        "ports[1]: names a Service other than its own");
  CHECK(refused([](uint8_t* b, Header& h) { record<EndpointRecord>(b, h, kEndpoints, 0)->port_index = 7; }) ==
        "endpoints[0]: names a port other than its own");
  CHECK(refused([](uint8_t* b, Header& h) { record<EndpointRecord>(b, h, kEndpoints, 0)->state = 3; }) ==
        "endpoints[0]: state 3 is none of ready, terminating, not-ready");
  CHECK(refused([](uint8_t* b, Header& h) { record<EndpointRecord>(b, h, kEndpoints, 0)->flags = 0x80; }) ==
        "endpoints[0]: unknown flags");
  CHECK(refused([](uint8_t* b, Header& h) {
          record<EndpointRecord>(b, h, kEndpoints, 0)->address = rdmagw::service_address::from_ipv4(0x7F000001);
        }) == "endpoints[0].address: 127.0.0.1 is loopback: not an address a Service or pod holds");
  CHECK(refused([](uint8_t* b, Header& h) { record<AddressRecord>(b, h, kClusterIps, 0)->bytes[0] = 0xfd; }).empty());
  CHECK(refused([](uint8_t* b, Header& h) { *record<AddressRecord>(b, h, kClusterIps, 0) = a("fe80::1"); }) ==
        "services[0].cluster_ips[0]: fe80::1 is link-local (fe80::/10): not an address a Service or pod holds");
  // Nodes: an endpoint naming one the table does not have; a tunnel
  // address that is not a pod's, or one without the flag that says so.
  CHECK(refused([](uint8_t* b, Header& h) {
          record<EndpointRecord>(b, h, kEndpoints, 0)->node = h.sections[kNodes].count;  // one past the last
        }) == "endpoints[0]: names a node the table does not have");
  CHECK(refused([](uint8_t* b, Header& h) {
          record<EndpointRecord>(b, h, kEndpoints, 0)->node = h.sections[kNodes].count - 1;
        }).empty());
  CHECK(refused([](uint8_t* b, Header& h) { record<EndpointRecord>(b, h, kEndpoints, 0)->reserved = 1; }) ==
        "endpoints[0]: reserved bytes are not 0");
  CHECK(refused([](uint8_t* b, Header& h) {
          record<NodeRecord>(b, h, kNodes, 1)->tunnel = rdmagw::service_address::from_ipv4(0xE0000001);
        }) == "nodes[1].tunnel: 224.0.0.1 is multicast (224.0.0.0/4): not an address a Service or pod holds");
  CHECK(refused([](uint8_t* b, Header& h) { record<NodeRecord>(b, h, kNodes, 0)->tunnel.bytes[15] = 1; }) ==
        "nodes[0]: a tunnel address without the flag that says it has one");
  CHECK(refused([](uint8_t* b, Header& h) { record<NodeRecord>(b, h, kNodes, 0)->flags = 2; }) ==
        "nodes[0]: unknown flags");
  CHECK(refused([](uint8_t* b, Header& h) { record<NodeRecord>(b, h, kNodes, 0)->name.length = 0; }) ==
        "nodes[0]: no name");
  CHECK(refused([](uint8_t*, Header& h) { h.sections[kNodes].count += 1000; }).rfind("section nodes", 0) == 0);
  // The not-ready endpoint listed as ready, the ready list out of order.
  CHECK(refused([](uint8_t* b, Header& h) { *record<uint32_t>(b, h, kReady, 1) = 1; }) ==
        "ready[1]: not one of its port's ready endpoints, in order");
  CHECK(refused([](uint8_t* b, Header& h) { record<EndpointRecord>(b, h, kEndpoints, 1)->state = 0; }) ==
        "ports[0]: its ready list is not its ready endpoints");
  // Index slots: a value out of range, every slot used (a search could not
  // end), a size not a power of two.
  auto first_used = [](uint8_t* b, Header& h, SectionIndex which) {
    for (uint32_t i = 0;; ++i)
      if (record<IndexSlot>(b, h, which, i)->used) return record<IndexSlot>(b, h, which, i);
  };
  CHECK(refused([&](uint8_t* b, Header& h) { first_used(b, h, kEndpointIndex)->value = 5; }).find("names a record") !=
        std::string::npos);
  CHECK(refused([](uint8_t* b, Header& h) {
          for (uint32_t i = 0; i < h.sections[kEndpointIndex].count; ++i)
            record<IndexSlot>(b, h, kEndpointIndex, i)->used = 1;
        }).find("endpoint_index") != std::string::npos);
  CHECK(refused([](uint8_t*, Header& h) { h.sections[kClusterIpIndex].count -= 1; }) ==
        "cluster_ip_index: 7 slots, not a power of two");
}

TEST_CASE("an index slot filed under a key its record does not have finds nothing, by either key") {
  // The check does not read the records in the slots' order (it would on
  // every change); each lookup compares the record it found instead.
  auto bytes = sample();
  Header& h = *reinterpret_cast<Header*>(bytes->data());
  for (uint32_t i = 0; i < h.sections[kEndpointIndex].count; ++i) {
    IndexSlot* slot = record<IndexSlot>(bytes->data(), h, kEndpointIndex, i);
    if (slot->used && slot->port == 5432) slot->value = 0;  // pg's slot names redis-0 at 10.0.1.1:6380
  }
  for (uint32_t i = 0; i < h.sections[kClusterIpIndex].count; ++i) {
    IndexSlot* slot = record<IndexSlot>(bytes->data(), h, kClusterIpIndex, i);
    if (slot->used && slot->port == 26379) slot->value = 0;  // the sentinel port's slot names port 6379
  }
  reseal(*bytes);
  auto table = open_ok(bytes);
  CHECK(table->find_endpoint(a("10.0.2.1"), 5432).endpoint == nullptr);
  CHECK(table->find_endpoint(a("10.0.1.1"), 6380).endpoint != nullptr);
  CHECK(table->find_cluster_ip(a("10.96.0.10"), 26379) == nullptr);
  CHECK(table->find_cluster_ip(a("10.96.0.10"), 6379) != nullptr);
}
