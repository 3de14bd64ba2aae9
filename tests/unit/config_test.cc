// SPDX-License-Identifier: Apache-2.0
#include "config/config.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/protocol_limits.h"
#include "config/config_diff.h"
#include "config/key_suggestion.h"
#include "test_support.h"

using rdmagw::AuthMode;
using rdmagw::closest_key;
using rdmagw::Config;
using rdmagw::ConfigError;
using rdmagw::ConfigResult;
using rdmagw::edit_distance;
namespace config_keys = rdmagw::config_keys;
using rdmagw::Endpoint;
using rdmagw::load_config_file;
using rdmagw::parse_config_text;
using rdmagw::PeerConfig;
using rdmagw::TargetFacts;
using rdmagw::TargetRefusal;
using rdmagw::TransportMode;
using rdmagw::test::error_lines;
using rdmagw::test::parse_config_ok;

namespace {

// Joins lines with '\n' so that each test's line numbers are easy to read off.
std::string lines(std::initializer_list<const char*> ls) {
  std::string out;
  for (const char* l : ls) {
    out += l;
    out += '\n';
  }
  return out;
}

struct Expected {
  int line;
  int column;
  std::string key_path;
  std::string fragment;  // must occur in the message
};

// The text must be rejected with exactly these errors, in this order.
void expect_errors(const std::string& text, const std::vector<Expected>& expected) {
  ConfigResult r = parse_config_text(text, "test.yaml");
  INFO("input:\n" << text << "errors:\n" << error_lines(r));
  CHECK(r.config == nullptr);
  REQUIRE(r.errors.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const ConfigError& e = r.errors[i];
    const Expected& x = expected[i];
    INFO("error #" << i);
    CHECK(e.file == "test.yaml");
    CHECK(e.line == x.line);
    CHECK(e.column == x.column);
    CHECK(e.key_path == x.key_path);
    CHECK_THAT(e.message, Catch::Contains(x.fragment));
  }
}

// Whether `config`'s targets admit `target` for a peer at `peer`.
bool allowed(const Config& config, const Endpoint& target, const sockaddr* peer, std::string_view peer_name = {},
             const TargetFacts& facts = {}) {
  return config.target_refusal(target, peer, peer_name, facts) == TargetRefusal::kNone;
}

Endpoint ep(const std::string& text) {
  std::string err;
  auto e = rdmagw::parse_endpoint(text, &err);
  REQUIRE(e.has_value());
  return *e;
}

unsigned expected_default_workers() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  if (n > 256) return 256;
  return static_cast<unsigned>(n);
}

// Repository root, from this file's (absolute, under CMake) path.
std::string source_root() {
  std::string here = __FILE__;
  const std::string suffix = "tests/unit/config_test.cc";
  REQUIRE(here.size() > suffix.size());
  REQUIRE(here.compare(here.size() - suffix.size(), suffix.size(), suffix) == 0);
  return here.substr(0, here.size() - suffix.size());
}

const std::string kFullExample = lines({
    "node: host-a",                                   // 1
    "admin: 127.0.0.1:9911",                          // 2
    "workers: 3",                                     // 3
    "tunnel:",                                        // 4
    "  address: 10.0.0.1",                            // 5
    "  tcp_port: 7571",                               // 6
    "  rdma_port: 7572",                              // 7
    "  transport: rdma",                              // 8
    "  buffer_size: 32KiB",                           // 9
    "  stream_window: 512KiB",                        // 10
    "  session_budget: 64MiB",                        // 11
    "  keepalive_interval_ms: 1000",                  // 12
    "  keepalive_timeout_ms: 4000",                   // 13
    "  connect_timeout_ms: 2500",                     // 14
    "  reconnect_max_ms: 8000",                       // 15
    "  auth:",                                        // 16
    "    mode: psk",                                  // 17
    "    key_files: [/etc/rdmagw/a, /etc/rdmagw/b]",  // 18
    "peers:",                                         // 19
    "  - name: host-b",                               // 20
    "    address: 10.0.0.2",                          // 21
    "    tcp_port: 7481",                             // 22
    "    rdma_port: 7482",                            // 23
    "  - name: host-c",                               // 24
    "    address: \"fd00::3\"",                       // 25
    "    tcp_port: 7491",                             // 26
    "listeners:",                                     // 27
    "  - name: redis",                                // 28
    "    listen: tcp:127.0.0.1:6380",                 // 29
    "    peer: host-b",                               // 30
    "    target: tcp:127.0.0.1:6379",                 // 31
    "  - name: redis-unix",                           // 32
    "    listen: unix:/run/rdmagw/redis.sock",        // 33
    "    peer: host-c",                               // 34
    "    target: unix:/run/redis/redis.sock",         // 35
    "targets:",                                       // 36
    "  - tcp:127.0.0.1:6379",                         // 37
    "  - unix:/run/redis/redis.sock",                 // 38
    "  - tcp:[::1]:5432",                             // 39
    "shutdown_timeout_ms: 2000",                      // 40
    "log_level: debug",                               // 41
});

// A peer to point listeners at; listeners start on line 6.
const char* const kNode = "node: host-a";
const char* const kPeers = "peers:";
const char* const kPeerB1 = "  - name: host-b";
const char* const kPeerB2 = "    address: 10.0.0.2";
const char* const kPeerB3 = "    tcp_port: 7481";

}  // namespace

// ---------------------------------------------------------------------------
// Valid configurations

TEST_CASE("full example parses with every value", "[config]") {
  auto c = parse_config_ok(kFullExample);
  CHECK(c->source_file == "ok.yaml");
  CHECK(c->node == "host-a");
  CHECK(c->admin == "127.0.0.1:9911");
  CHECK(c->workers == 3);

  CHECK(c->tunnel.address == "10.0.0.1");
  CHECK(c->tunnel.tcp_port == 7571);
  CHECK(c->tunnel.rdma_port == 7572);
  CHECK(c->tunnel.transport == TransportMode::kRdma);
  CHECK(c->tunnel.buffer_size == 32u * 1024);
  CHECK(c->tunnel.stream_window == 512u * 1024);
  CHECK(c->tunnel.session_budget == 64ull * 1024 * 1024);
  CHECK(c->tunnel.keepalive_interval_ms == 1000);
  CHECK(c->tunnel.keepalive_timeout_ms == 4000);
  CHECK(c->tunnel.connect_timeout_ms == 2500);
  CHECK(c->tunnel.reconnect_max_ms == 8000);
  CHECK(c->tunnel.auth.configured);
  CHECK(c->tunnel.auth.mode == AuthMode::kPsk);
  CHECK(c->tunnel.auth.key_files == std::vector<std::string>{"/etc/rdmagw/a", "/etc/rdmagw/b"});
  CHECK(c->tunnel.auth.keys == nullptr);  // parse_config_text reads no key file

  REQUIRE(c->peers.size() == 2);
  CHECK(c->peers[0].name == "host-b");
  CHECK(c->peers[0].address == "10.0.0.2");
  CHECK(c->peers[0].tcp_port == 7481);
  CHECK(c->peers[0].rdma_port == 7482);
  CHECK(c->peers[0].tcp_endpoint.to_string() == "tcp:10.0.0.2:7481");
  CHECK(c->peers[1].name == "host-c");
  CHECK(c->peers[1].address == "fd00::3");
  CHECK(c->peers[1].tcp_port == 7491);
  CHECK(c->peers[1].rdma_port == 7472);  // default
  CHECK(c->peers[1].tcp_endpoint.to_string() == "tcp:[fd00::3]:7491");

  REQUIRE(c->listeners.size() == 2);
  CHECK(c->listeners[0].name == "redis");
  CHECK(c->listeners[0].listen.to_string() == "tcp:127.0.0.1:6380");
  CHECK(c->listeners[0].peer == "host-b");
  CHECK(c->listeners[0].target.to_string() == "tcp:127.0.0.1:6379");
  CHECK(c->listeners[1].name == "redis-unix");
  CHECK(c->listeners[1].listen.kind == Endpoint::Kind::kUnix);
  CHECK(c->listeners[1].listen.to_string() == "unix:/run/rdmagw/redis.sock");
  CHECK(c->listeners[1].peer == "host-c");
  CHECK(c->listeners[1].target.to_string() == "unix:/run/redis/redis.sock");

  REQUIRE(c->targets.size() == 3);
  CHECK(c->targets[0].to_string() == "tcp:127.0.0.1:6379");
  CHECK(c->targets[1].to_string() == "unix:/run/redis/redis.sock");
  CHECK(c->targets[2].to_string() == "tcp:[::1]:5432");
  CHECK(c->shutdown_timeout_ms == 2000);
  CHECK(c->log_level == "debug");

  REQUIRE(c->peers.size() >= 2);
  CHECK(c->peers[1].name == "host-c");
  CHECK(std::none_of(c->peers.begin(), c->peers.end(), [](const PeerConfig& p) { return p.name == "host-z"; }));
  CHECK(c->target_listed(ep("tcp:127.0.0.1:6379")));
  CHECK(c->target_listed(ep("tcp:[0::1]:5432")));
  CHECK_FALSE(c->target_listed(ep("tcp:127.0.0.1:6378")));
}

namespace {
// A peer's end of the session at `ip` (the pointer is valid until the next call).
const sockaddr* at(const char* ip) {
  static sockaddr_storage ss;
  std::string error;
  auto e = rdmagw::make_tcp_endpoint(ip, 1, &error);
  REQUIRE(e);
  ss = e->addr;
  return reinterpret_cast<const sockaddr*>(&ss);
}
}  // namespace

// Authorization by peer: a targets entry may name which peers may open it,
// by the address of their end of the session.
TEST_CASE("targets: an entry open to some peers only", "[config][auth]") {
  auto c =
      parse_config_ok(lines({"node: b", "targets:", "  - tcp:127.0.0.1:6379",
                             "  - {target: \"tcp:127.0.0.1:5432\", peers: [10.0.1.0/24, 10.0.2.7, \"fd00::/64\"]}"}));
  REQUIRE(c->targets.size() == 2);
  CHECK(c->targets[1].to_string() == "tcp:127.0.0.1:5432 peers: 10.0.1.0/24, 10.0.2.7/32, fd00::/64");
  CHECK(allowed(*c, ep("tcp:127.0.0.1:6379"), at("192.0.2.1")));  // open to all
  CHECK(allowed(*c, ep("tcp:127.0.0.1:5432"), at("10.0.1.99")));
  CHECK(allowed(*c, ep("tcp:127.0.0.1:5432"), at("10.0.2.7")));
  CHECK(allowed(*c, ep("tcp:127.0.0.1:5432"), at("fd00::5")));
  CHECK(c->target_refusal(ep("tcp:127.0.0.1:5432"), at("10.0.2.8")) == rdmagw::TargetRefusal::kNotForThisPeer);
  CHECK(c->target_refusal(ep("tcp:127.0.0.1:5432"), nullptr) ==
        rdmagw::TargetRefusal::kNotForThisPeer);  // fails closed
  CHECK(c->target_refusal(ep("tcp:127.0.0.1:1"), at("10.0.1.1")) == rdmagw::TargetRefusal::kNotListed);
  CHECK(c->target_listed(ep("tcp:127.0.0.1:5432")));

  // A reload that changes who may open a target is a change of targets.
  auto d = parse_config_ok(lines(
      {"node: b", "targets:", "  - tcp:127.0.0.1:6379", "  - {target: \"tcp:127.0.0.1:5432\", peers: [10.0.1.0/24]}"}));
  auto changes = rdmagw::describe_changes(*c, *d);
  CHECK(std::find(changes.begin(), changes.end(), "targets: 1 added, 1 removed") != changes.end());

  expect_errors(lines({"node: b", "targets:", "  - {target: \"tcp:127.0.0.1:5432\", peers: [host-a]}"}),
                {{3, 44, "targets[0].peers[0]", "'host-a' is not an address or CIDR"}});
  expect_errors(lines({"node: b", "targets:", "  - {target: \"tcp:127.0.0.1:5432\", peers: []}"}),
                {{3, 43, "targets[0].peers", "an empty list lets no peer open it"}});
  expect_errors(lines({"node: b", "targets:", "  - {target: \"tcp:127.0.0.1:5432\", peers: [\"10.0.0.0/8:80\"]}"}),
                {{3, 44, "targets[0].peers[0]", "matched by address only"}});
  // Without peers, as an endpoint alone: open to every authenticated peer.
  auto open = parse_config_ok(lines({"node: b", "targets:", "  - {target: \"tcp:127.0.0.1:5432\"}"}));
  CHECK(allowed(*open, ep("tcp:127.0.0.1:5432"), at("10.9.9.9")));
  expect_errors(lines({"node: b", "targets:", "  - {target: \"tcp:127.0.0.1:5432\", peers: [10.0.0.1], who: x}"}),
                {{3, 55, "targets[0].who", "unknown key"}});
}

// proxy_protocol: v2 on a targets entry: the entry that admits a stream
// says whether its connection begins with a PROXY header.
TEST_CASE("targets: proxy_protocol v2, on the entry that admits the peer", "[config][auth]") {
  auto c = parse_config_ok(lines({"node: b", "targets:", "  - {target: \"tcp:127.0.0.1:8080\", proxy_protocol: v2}",
                                  "  - {target: \"tcp:127.0.0.1:5432\", peers: [10.0.1.0/24], proxy_protocol: v2}",
                                  "  - tcp:127.0.0.1:5432"}));
  CHECK(c->targets[0].to_string() == "tcp:127.0.0.1:8080 proxy_protocol: v2");
  const rdmagw::TargetRule* admitted = nullptr;
  CHECK(c->target_refusal(ep("tcp:127.0.0.1:8080"), at("10.9.9.9"), {}, {}, &admitted) == rdmagw::TargetRefusal::kNone);
  REQUIRE(admitted);
  CHECK(admitted->proxy_protocol);
  // The first entry that admits decides: a peer in 10.0.1.0/24 gets the header, another does not.
  CHECK(c->target_refusal(ep("tcp:127.0.0.1:5432"), at("10.0.1.5"), {}, {}, &admitted) == rdmagw::TargetRefusal::kNone);
  CHECK(admitted->proxy_protocol);
  CHECK(c->target_refusal(ep("tcp:127.0.0.1:5432"), at("10.0.2.5"), {}, {}, &admitted) == rdmagw::TargetRefusal::kNone);
  CHECK_FALSE(admitted->proxy_protocol);
  // Turning it on or off is a change of targets (reloaded).
  auto off = parse_config_ok(lines({"node: b", "targets:", "  - {target: \"tcp:127.0.0.1:8080\"}",
                                    "  - {target: \"tcp:127.0.0.1:5432\", peers: [10.0.1.0/24], proxy_protocol: v2}",
                                    "  - tcp:127.0.0.1:5432"}));
  auto changes = rdmagw::describe_changes(*c, *off);
  CHECK(std::find(changes.begin(), changes.end(), "targets: 1 added, 1 removed") != changes.end());
  expect_errors(lines({"node: b", "targets:", "  - {target: \"tcp:127.0.0.1:8080\", proxy_protocol: v1}"}),
                {{3, 52, "targets[0].proxy_protocol", "'v1' is not a PROXY protocol version rdmagw sends: v2"}});
}

// tcp:self:PORT: a pod's address is not known when its ConfigMap is
// written; the entry admits PORT on whatever address this host holds, as the
// caller's test of local addresses says.
TEST_CASE("targets: tcp:self:PORT covers the port on this host's addresses only", "[config][auth]") {
  auto c = parse_config_ok(
      lines({"node: b", "targets:", "  - tcp:self:6379", "  - {target: \"tcp:self:5432\", peers: [10.0.1.0/24]}"}));
  REQUIRE(c->targets.size() == 2);
  CHECK(c->targets[0].to_string() == "tcp:self:6379");
  CHECK(c->targets[1].to_string() == "tcp:self:5432 peers: 10.0.1.0/24");
  rdmagw::LocalAddressTest mine = [](const Endpoint& e) {
    return e.to_string() == "tcp:10.0.3.7:6379" || e.to_string() == "tcp:10.0.3.7:5432" ||
           e.to_string() == "tcp:10.0.3.7:6380";
  };
  CHECK(c->target_listed(ep("tcp:10.0.3.7:6379"), {mine}));
  CHECK_FALSE(c->target_listed(ep("tcp:10.0.3.8:6379"), {mine}));  // another host's address
  CHECK_FALSE(c->target_listed(ep("tcp:10.0.3.7:6380"), {mine}));  // another port
  CHECK_FALSE(c->target_listed(ep("tcp:10.0.3.7:6379")));          // no test of addresses: nothing is local
  CHECK_FALSE(c->target_listed(ep("unix:/run/x.sock"), {[](const Endpoint&) { return true; }}));
  sockaddr_storage peer = ep("tcp:10.0.1.5:1").addr;
  sockaddr_storage stranger = ep("tcp:10.0.2.5:1").addr;
  CHECK(allowed(*c, ep("tcp:10.0.3.7:5432"), reinterpret_cast<const sockaddr*>(&peer), {}, {mine}));
  CHECK(c->target_refusal(ep("tcp:10.0.3.7:5432"), reinterpret_cast<const sockaddr*>(&stranger), {}, {mine}) ==
        rdmagw::TargetRefusal::kNotForThisPeer);

  for (const char* bad : {"tcp:self:", "tcp:self:0", "tcp:self:65536", "tcp:self:63x", "tcp:self:123456"})
    expect_errors("node: b\ntargets:\n  - \"" + std::string(bad) + "\"\n",
                  {{3, 5, "targets[0]", "tcp:self: takes a port, 1..65535"}});
}

// services:this-node: a node-mode rdmagw admits the endpoints the services
// table puts on its node, as the caller's test of the table says.
TEST_CASE("targets: services:this-node covers what the table puts on this node, and needs the table",
          "[config][auth]") {
  auto c = parse_config_ok(lines({"node: b", "services: {file: /run/rdmagw-k8s/services.table}", "targets:",
                                  "  - services:this-node", "  - {target: services:this-node, peers: [10.0.1.0/24]}"}));
  REQUIRE(c->targets.size() == 2);
  CHECK(c->targets[0].to_string() == "services:this-node");
  CHECK(c->targets[1].to_string() == "services:this-node peers: 10.0.1.0/24");
  rdmagw::TargetFacts facts;
  facts.on_this_node = [](const Endpoint& e) { return e.to_string() == "tcp:10.0.3.7:8080"; };
  CHECK(c->target_listed(ep("tcp:10.0.3.7:8080"), facts));
  CHECK_FALSE(c->target_listed(ep("tcp:10.0.3.8:8080"), facts));
  CHECK_FALSE(c->target_listed(ep("tcp:10.0.3.7:8080")));  // no table: nothing is this node's
  CHECK_FALSE(c->target_listed(ep("unix:/run/x.sock"), {{}, [](const Endpoint&) { return true; }}));
  // Not a `tcp:self:` entry: this host's own addresses are not the table's.
  CHECK_FALSE(c->target_listed(ep("tcp:10.0.3.7:8080"), {[](const Endpoint&) { return true; }, {}}));

  expect_errors("node: b\ntargets:\n  - services:this-node\n",
                {{3, 5, "targets[0]", "services:this-node needs services.file"}});
}

TEST_CASE("defaults apply to a minimal config", "[config]") {
  auto c = parse_config_ok("node: host-a\n");
  CHECK(c->node == "host-a");
  CHECK(c->admin == "127.0.0.1:9901");
  CHECK(c->workers == expected_default_workers());
  CHECK(c->workers >= 1);
  CHECK(c->tunnel.address == "127.0.0.1");
  CHECK(c->tunnel.tcp_port == 7471);
  CHECK(c->tunnel.rdma_port == 7472);
  CHECK(c->tunnel.transport == TransportMode::kAuto);
  CHECK(c->tunnel.buffer_size == 32768);
  CHECK(c->tunnel.rdma.recv_depth == 64);
  CHECK(c->tunnel.stream_window == 262144);
  CHECK(c->tunnel.session_budget == 33554432);
  CHECK(c->tunnel.keepalive_interval_ms == 5000);
  CHECK(c->tunnel.keepalive_timeout_ms == 15000);
  CHECK(c->tunnel.connect_timeout_ms == 3000);
  CHECK(c->tunnel.reconnect_max_ms == 2000);
  CHECK(c->tunnel.resume_timeout_ms == 10000);
  CHECK(c->tunnel.rdma_probe_interval_ms == 2000);
  CHECK(c->tunnel.rdma_head_start_ms == 1000);
  CHECK(c->peers.empty());
  CHECK(c->listeners.empty());
  CHECK(c->targets.empty());
  CHECK_FALSE(c->target_listed(ep("tcp:127.0.0.1:6379")));
  CHECK(c->shutdown_timeout_ms == 10000);
  CHECK(c->log_level == "info");
}

TEST_CASE("empty sections mean defaults / nothing", "[config]") {
  auto c = parse_config_ok(lines({"node: host-a", "tunnel:", "peers:", "listeners: []", "targets:"}));
  CHECK(c->tunnel.tcp_port == 7471);
  CHECK(c->peers.empty());
  CHECK(c->listeners.empty());
  CHECK(c->targets.empty());
}

TEST_CASE("transport values and IPv6 tunnel address", "[config]") {
  CHECK(parse_config_ok(lines({"node: a", "tunnel:", "  transport: tcp"}))->tunnel.transport == TransportMode::kTcp);
  CHECK(parse_config_ok(lines({"node: a", "tunnel:", "  transport: auto"}))->tunnel.transport == TransportMode::kAuto);
  auto c = parse_config_ok(lines({"node: a", "tunnel:", "  address: \"::1\"", "admin: \"[::1]:9901\""}));
  CHECK(c->tunnel.address == "::1");
  CHECK(c->admin == "[::1]:9901");
}

TEST_CASE("byte sizes accept integers and KiB/MiB/GiB suffixes", "[config]") {
  auto c = parse_config_ok(lines({
      "node: a",
      "tunnel:",
      "  buffer_size: 65536",
      "  stream_window: \"1MiB\"",
      "  session_budget: 2GiB",
  }));
  CHECK(c->tunnel.buffer_size == 65536);
  CHECK(c->tunnel.stream_window == 1024u * 1024);
  CHECK(c->tunnel.session_budget == 2ull * 1024 * 1024 * 1024);

  c = parse_config_ok(
      lines({"node: a", "tunnel:", "  buffer_size: 1KiB", "  stream_window: 4 MiB", "  session_budget: 64MiB"}));
  CHECK(c->tunnel.buffer_size == 1024);
  CHECK(c->tunnel.stream_window == 4u * 1024 * 1024);
  CHECK(c->tunnel.session_budget == 64ull * 1024 * 1024);

  // Upper bounds are inclusive.
  c = parse_config_ok(
      lines({"node: a", "tunnel:", "  buffer_size: 1MiB", "  stream_window: 64MiB", "  session_budget: 64MiB"}));
  CHECK(c->tunnel.buffer_size == 1048576);
  CHECK(c->tunnel.stream_window == 67108864);
}

TEST_CASE("byte sizes reject bad suffixes, fractions and out-of-range values", "[config][errors]") {
  expect_errors(
      lines({"node: a", "tunnel:", "  buffer_size: 16KB"}),
      {{3, 16, "tunnel.buffer_size", "byte size (an integer, or a number with suffix KiB, MiB or GiB), got '16KB'"}});
  expect_errors(lines({"node: a", "tunnel:", "  buffer_size: 1.5KiB"}),
                {{3, 16, "tunnel.buffer_size", "got '1.5KiB'"}});
  expect_errors(lines({"node: a", "tunnel:", "  buffer_size: 16kib"}), {{3, 16, "tunnel.buffer_size", "got '16kib'"}});
  expect_errors(lines({"node: a", "tunnel:", "  buffer_size: MiB"}), {{3, 16, "tunnel.buffer_size", "got 'MiB'"}});
  expect_errors(lines({"node: a", "tunnel:", "  buffer_size: 512"}),
                {{3, 16, "tunnel.buffer_size", "must be between 1KiB and 1MiB, got 512"}});
  expect_errors(lines({"node: a", "tunnel:", "  buffer_size: 2MiB"}),
                {{3, 16, "tunnel.buffer_size", "got '2MiB' (2097152 bytes)"}});
  expect_errors(lines({"node: a", "tunnel:", "  stream_window: 128MiB"}),
                {{3, 18, "tunnel.stream_window", "must be between 1KiB and 64MiB"}});
  expect_errors(lines({"node: a", "tunnel:", "  session_budget: 99999999999GiB"}),
                {{3, 19, "tunnel.session_budget", "too large"}});
  expect_errors(lines({"node: a", "tunnel:", "  session_budget: [1]"}),
                {{3, 19, "tunnel.session_budget", "got a list"}});
}

// ---------------------------------------------------------------------------
// Protocol limits (common/protocol_limits.h). Every value that travels to the
// peer is accepted up to the limit the peer's decoder enforces and refused one
// past it, with the value and the range in the message; tests/unit/frame_test.cc
// checks the decoder side of the same limits.

TEST_CASE("tunnel sizes are accepted at the protocol limits", "[config][limits]") {
  auto c = parse_config_ok(lines(
      {"node: a", "tunnel:", "  buffer_size: 1048576", "  stream_window: 67108864", "  session_budget: 4294967296"}));
  CHECK(c->tunnel.buffer_size == rdmagw::kMaxDataMax);
  CHECK(c->tunnel.stream_window == rdmagw::kStreamWindowMax);
  CHECK(c->tunnel.session_budget == rdmagw::kSessionWindowMax);
  c = parse_config_ok(
      lines({"node: a", "tunnel:", "  buffer_size: 1024", "  stream_window: 1024", "  session_budget: 1024"}));
  CHECK(c->tunnel.buffer_size == rdmagw::kMaxDataMin);
  CHECK(c->tunnel.stream_window == rdmagw::kStreamWindowMin);
  CHECK(c->tunnel.session_budget == rdmagw::kSessionWindowMin);
}

TEST_CASE("tunnel sizes one past the protocol limits are refused with value and range", "[config][limits][errors]") {
  expect_errors(lines({kNode, "tunnel:", "  buffer_size: 1048577"}),
                {{3, 16, "tunnel.buffer_size", "must be between 1KiB and 1MiB, got 1048577"}});
  expect_errors(lines({kNode, "tunnel:", "  buffer_size: 1023"}),
                {{3, 16, "tunnel.buffer_size", "must be between 1KiB and 1MiB, got 1023"}});
  expect_errors(lines({kNode, "tunnel:", "  stream_window: 67108865"}),
                {{3, 18, "tunnel.stream_window", "must be between 1KiB and 64MiB, got 67108865"}});
  expect_errors(lines({kNode, "tunnel:", "  stream_window: 1023"}),
                {{3, 18, "tunnel.stream_window", "must be between 1KiB and 64MiB, got 1023"}});
  expect_errors(lines({kNode, "tunnel:", "  session_budget: 4294967297"}),
                {{3, 19, "tunnel.session_budget", "must be between 1KiB and 4GiB, got 4294967297"}});
  expect_errors(lines({kNode, "tunnel:", "  session_budget: 1023"}),
                {{3, 19, "tunnel.session_budget", "must be between 1KiB and 4GiB, got 1023"}});
}

TEST_CASE("session_budget beyond what HELLO may announce is refused (it was accepted up to 2^64-1)",
          "[config][limits][errors]") {
  expect_errors(lines({kNode, "tunnel:", "  session_budget: 18446744073709551615"}),
                {{3, 19, "tunnel.session_budget", "must be between 1KiB and 4GiB, got 18446744073709551615"}});
  expect_errors(lines({kNode, "tunnel:", "  session_budget: 5GiB"}),
                {{3, 19, "tunnel.session_budget", "must be between 1KiB and 4GiB, got '5GiB' (5368709120 bytes)"}});
  CHECK(parse_config_ok(lines({kNode, "tunnel:", "  session_budget: 4GiB"}))->tunnel.session_budget == 4294967296ull);
}

TEST_CASE("node names are accepted up to the 255 bytes HELLO carries", "[config][limits]") {
  const std::string at_limit(rdmagw::kMaxNodeNameLength, 'n');
  CHECK(parse_config_ok("node: " + at_limit + "\n")->node == at_limit);
  expect_errors(
      "node: " + at_limit + "n\n",
      {{1, 7, "node", "must be at most 255 bytes long (the tunnel handshake carries it), got 256 bytes: 'nnnn"}});
  // Bytes, not characters: 128 two-byte characters are 256 bytes.
  std::string wide;
  for (int i = 0; i < 128; ++i) wide += "\xc3\xa9";  // U+00E9
  expect_errors("node: " + wide + "\n", {{1, 7, "node", "got 256 bytes"}});
}

TEST_CASE("node names are letters, digits, '.', '-' and '_': a control byte never enters", "[config]") {
  CHECK(parse_config_ok("node: host-a.zone_1\n")->node == "host-a.zone_1");
  expect_errors("node: \"x\\e]0;pwned\\a\"\n",
                {{1, 7, "node",
                  "not a node name: byte 2 is 0x1b (1 to 255 bytes of ASCII letters, digits, '.', '-' "
                  "and '_'), got 'x\\x1b]0;pwned\\x07'"}});
  expect_errors("node: host a\n", {{1, 7, "node", "byte 5 is 0x20 (' ')"}});
}

TEST_CASE("a TCP listener other hosts may reach needs clients; they are CIDRs", "[config]") {
  const std::string head = lines({kNode, "peers:", "  - {name: b, address: 127.0.0.1, tcp_port: 7481}", "listeners:"});
  auto listener = [&](const std::string& listen, const std::string& extra = "") {
    return head + "  - {name: l, listen: \"" + listen + "\", peer: b, target: \"tcp:127.0.0.1:6379\"" + extra + "}\n";
  };
  CHECK(parse_config_ok(listener("tcp:127.0.0.1:6380"))->listeners[0].clients.empty());
  expect_errors(listener("tcp:0.0.0.0:6380"), {{5, 23, "listeners[0].listen", "say who may connect: clients:"}});
  expect_errors(listener("tcp:169.254.77.1:6380"), {{5, 23, "listeners[0].listen", "or listen on 127.0.0.1"}});
  auto c = parse_config_ok(listener("tcp:0.0.0.0:6380", ", clients: [10.244.0.0/16, 192.168.1.7]"));
  REQUIRE(c->listeners[0].clients.size() == 2);
  sockaddr_in in{};
  in.sin_family = AF_INET;
  inet_pton(AF_INET, "10.244.3.4", &in.sin_addr);
  CHECK(c->listeners[0].admits(reinterpret_cast<const sockaddr*>(&in)));
  inet_pton(AF_INET, "10.245.0.1", &in.sin_addr);
  CHECK_FALSE(c->listeners[0].admits(reinterpret_cast<const sockaddr*>(&in)));
  expect_errors(listener("tcp:0.0.0.0:6380", ", clients: []"),
                {{5, 91, "listeners[0].clients", "lets nobody connect"}});
  expect_errors(listener("tcp:0.0.0.0:6380", ", clients: [10.0.0.0/8:80]"),
                {{5, 92, "listeners[0].clients[0]", "matched by address only"}});
  expect_errors(listener("tcp:0.0.0.0:6380", ", clients: [nowhere]"),
                {{5, 92, "listeners[0].clients[0]", "is not an address or CIDR"}});
  expect_errors(listener("unix:/run/l.sock", ", clients: [10.0.0.0/8]"),
                {{5, 91, "listeners[0].clients", "applies to TCP listeners only"}});
}

TEST_CASE("services.direct names when a Service connection may leave the tunnel", "[config]") {
  CHECK(parse_config_ok("node: a\nservices: {file: /s.json}\n")->services.direct ==
        rdmagw::ServicesDirect::kWithoutRdmagw);
  CHECK(parse_config_ok("node: a\nservices: {file: /s.json, direct: never}\n")->services.direct ==
        rdmagw::ServicesDirect::kNever);
  CHECK(parse_config_ok("node: a\nservices: {file: /s.json, direct: fallback}\n")->services.direct ==
        rdmagw::ServicesDirect::kFallback);
  expect_errors("node: a\nservices: {file: /s.json, direct: always}\n", {{2, 35, "services.direct", "got 'always'"}});
}

TEST_CASE("tunnel.rdma.recv_depth is accepted within the limits the peer's RDMA CM check uses", "[config][limits]") {
  // 8192 receives of 16KiB + headroom need a 528MiB slab for 4 sessions.
  auto c = parse_config_ok(
      lines({kNode, "tunnel:", "  buffer_size: 16KiB", "  rdma:", "    recv_depth: 8192", "    slab_size: 1GiB"}));
  CHECK(c->tunnel.rdma.recv_depth == rdmagw::kRdmaRecvDepthMax);
  CHECK(parse_config_ok(lines({kNode, "tunnel:", "  rdma:", "    recv_depth: 8"}))->tunnel.rdma.recv_depth ==
        rdmagw::kRdmaRecvDepthMin);
  expect_errors(lines({kNode, "tunnel:", "  rdma:", "    recv_depth: 8193", "    slab_size: 1GiB"}),
                {{4, 17, "tunnel.rdma.recv_depth", "must be between 8 and 8192, got 8193"}});
  expect_errors(lines({kNode, "tunnel:", "  rdma:", "    recv_depth: 7"}),
                {{4, 17, "tunnel.rdma.recv_depth", "must be between 8 and 8192, got 7"}});
}

TEST_CASE("the longest endpoints the parser accepts fit in an OPEN frame's target", "[config][limits]") {
  const std::string longest_path = "/" + std::string(106, 'p');  // sun_path holds 107 bytes + NUL
  auto c = parse_config_ok(
      lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: l", "    listen: tcp:127.0.0.1:6000",
             "    peer: host-b", "    target: \"tcp:[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535\"", "targets:"}) +
      "  - unix:" + longest_path + "\n");
  REQUIRE(c->targets.size() == 1);
  CHECK(c->targets[0].to_string().size() == 112);
  CHECK(c->targets[0].to_string().size() <= rdmagw::kMaxTargetLength);
  REQUIRE(c->listeners.size() == 1);
  CHECK(c->listeners[0].target.to_string().size() <= rdmagw::kMaxTargetLength);
  // One byte more is not a unix socket path at all.
  expect_errors(lines({kNode, "targets:"}) + "  - unix:" + longest_path + "p\n",
                {{3, 5, "targets[0]", "longer than 107 bytes"}});
}

TEST_CASE("integers may be quoted", "[config]") {
  auto c = parse_config_ok(lines({"node: a", "workers: \"4\"", "tunnel:", "  tcp_port: '7600'"}));
  CHECK(c->workers == 4);
  CHECK(c->tunnel.tcp_port == 7600);
}

TEST_CASE("rdma_port may equal tcp_port when transport is tcp", "[config]") {
  auto c = parse_config_ok(lines({"node: a", "tunnel:", "  transport: tcp", "  tcp_port: 7000", "  rdma_port: 7000"}));
  CHECK(c->tunnel.rdma_port == 7000);
}

TEST_CASE("the fleet example is valid: every route by destination lies in peer_cidrs", "[config][fleet]") {
  // parse_config_text: the key file it names exists on a fleet host only.
  std::ifstream in(source_root() + "config/examples/fleet-host.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(!text.empty());
  auto c = parse_config_ok(text);
  REQUIRE(c->tunnel.peer_cidrs.size() == 1);
  CHECK(c->tunnel.peer_cidrs[0].tcp_port == 7471);
  CHECK(c->listeners.at(0).routes.at(0).by_destination);
  CHECK(c->target_listed(ep("tcp:10.0.3.7:6379")));
}

TEST_CASE("example sidecar pair is valid and consistent", "[config]") {
  std::string root = source_root();
  ConfigResult a = load_config_file(root + "config/examples/two-sidecars-a.yaml");
  ConfigResult b = load_config_file(root + "config/examples/two-sidecars-b.yaml");
  INFO(error_lines(a) << error_lines(b));
  REQUIRE(a.config);
  REQUIRE(b.config);
  CHECK(a.config->source_file == root + "config/examples/two-sidecars-a.yaml");
  CHECK(a.config->node == "host-a");
  CHECK(b.config->node == "host-b");
  REQUIRE(a.config->listeners.size() == 1);
  const auto& l = a.config->listeners[0];
  CHECK(l.listen.to_string() == "tcp:127.0.0.1:6380");
  CHECK(l.peer == "host-b");
  CHECK(l.target.to_string() == "tcp:127.0.0.1:6379");
  const auto& peers = a.config->peers;
  auto named_b = std::find_if(peers.begin(), peers.end(), [](const PeerConfig& p) { return p.name == "host-b"; });
  REQUIRE(named_b != peers.end());
  const PeerConfig* peer_b = &*named_b;
  // a's view of b matches b's own tunnel...
  CHECK(peer_b->address == b.config->tunnel.address);
  CHECK(peer_b->tcp_port == b.config->tunnel.tcp_port);
  CHECK(peer_b->rdma_port == b.config->tunnel.rdma_port);
  // ...b allows the target a asks for, and the two sidecars use different ports.
  CHECK(b.config->target_listed(l.target));
  CHECK(a.config->tunnel.tcp_port != b.config->tunnel.tcp_port);
  CHECK(a.config->tunnel.rdma_port != b.config->tunnel.rdma_port);
  CHECK(a.config->admin != b.config->admin);
}

// ---------------------------------------------------------------------------
// Error reporting

TEST_CASE("ConfigError::to_string format", "[config][errors]") {
  ConfigResult r = parse_config_text(lines({"node: host-a", "worker: 4"}), "conf/a.yaml");
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].to_string() ==
        "conf/a.yaml:2:1: worker: unknown key 'worker' (did you mean 'workers'?); allowed keys here: node, admin, "
        "admin_token_file, workers, "
        "worker_cpus, tunnel, peers, listeners, targets, shutdown_timeout_ms, log_level, access_log, services, "
        "local_legs, metrics");
}

TEST_CASE("unknown top-level key", "[config][errors]") {
  expect_errors(lines({"node: host-a", "worker: 4"}),
                {{2, 1, "worker", "unknown key 'worker' (did you mean 'workers'?); allowed keys here: node,"}});
  // Nothing near enough: no suggestion.
  expect_errors(lines({"node: host-a", "threads: 4"}), {{2, 1, "threads", "unknown key 'threads'; allowed keys"}});
}

TEST_CASE("a misspelt required key is one error, naming the key it was taken for", "[config][errors]") {
  // Not also "required key 'target' is missing" for the same slip.
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
                       "    listen: tcp:127.0.0.1:6380", "    peer: host-b", "    tagret: tcp:127.0.0.1:6379"}),
                {{10, 5, "listeners[0].tagret", "unknown key 'tagret' (did you mean 'target'?)"}});
  // A slip for another key leaves the missing one reported.
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
                       "    listen: tcp:127.0.0.1:6380", "    peers: host-b"}),
                {{7, 5, "listeners[0].target", "required key 'target' is missing"},
                 {9, 5, "listeners[0].peers", "(did you mean 'peer'?)"}});
}

TEST_CASE("edit distance: a letter missing, added, changed, or two swapped is one edit", "[config][errors]") {
  CHECK(edit_distance("workers", "workers") == 0);
  CHECK(edit_distance("worker", "workers") == 1);
  CHECK(edit_distance("workerss", "workers") == 1);
  CHECK(edit_distance("wurkers", "workers") == 1);
  CHECK(edit_distance("wokrers", "workers") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("listen", "silent") == 4);
  config_keys::Keys keys = {"tcp_port", "rdma_port", "address"};
  CHECK(closest_key("tcp_prot", keys) == "tcp_port");
  CHECK(closest_key("adress", keys) == "address");
  CHECK_FALSE(closest_key("port", keys).has_value());  // three edits from either port key
  CHECK(closest_key("ab", {"ac", "abc"}) == "ac");     // a tie: the first
}

TEST_CASE("unknown key inside tunnel names the allowed keys", "[config][errors]") {
  expect_errors(lines({"node: host-a", "tunnel:", "  port: 7471"}),
                {{3, 3, "tunnel.port", "allowed keys here: address, tcp_port, rdma_port, transport"}});
}

TEST_CASE("duplicate top-level key is reported at the second occurrence", "[config][errors]") {
  expect_errors(lines({"node: host-a", "workers: 2", "node: host-b"}),
                {{3, 1, "node", "duplicate key 'node' (first given at line 1, column 1)"}});
}

TEST_CASE("duplicate key in a flow mapping", "[config][errors]") {
  expect_errors(lines({"node: host-a", "tunnel: {tcp_port: 1000, tcp_port: 2000}"}),
                {{2, 26, "tunnel.tcp_port", "duplicate key 'tcp_port' (first given at line 2, column 10)"}});
}

TEST_CASE("missing node", "[config][errors]") {
  expect_errors(lines({"# a comment", "workers: 2"}), {{2, 1, "node", "required key 'node' is missing"}});
}

TEST_CASE("missing key in a listener is reported at the listener", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
                       "    listen: tcp:127.0.0.1:6380", "    peer: host-b"}),
                {{7, 5, "listeners[0].target", "required key 'target' is missing"}});
}

TEST_CASE("missing keys in a peer", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, "  - name: host-b"}), {{3, 5, "peers[0].address", "required key 'address'"},
                                                             {3, 5, "peers[0].tcp_port", "required key 'tcp_port'"}});
}

TEST_CASE("a list where a string is expected", "[config][errors]") {
  expect_errors("node: [a, b]\n", {{1, 7, "node", "must be a non-empty string, got a list"}});
}

TEST_CASE("an empty value is reported at its key", "[config][errors]") {
  expect_errors(lines({"node:", "workers: 2"}), {{1, 1, "node", "got an empty value"}});
}

TEST_CASE("a non-integer port", "[config][errors]") {
  expect_errors(lines({"node: host-a", "tunnel:", "  tcp_port: seventy"}),
                {{3, 13, "tunnel.tcp_port", "must be an integer, got 'seventy'"}});
  expect_errors(lines({"node: host-a", "tunnel:", "  tcp_port: 0x1d2f"}),
                {{3, 13, "tunnel.tcp_port", "must be an integer, got '0x1d2f'"}});
}

TEST_CASE("a port out of range", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, "    tcp_port: 70000"}),
                {{5, 15, "peers[0].tcp_port", "must be between 1 and 65535, got 70000"}});
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "    rdma_port: 0"}),
                {{6, 16, "peers[0].rdma_port", "must be between 1 and 65535, got 0"}});
}

TEST_CASE("a non-numeric peer address", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, kPeerB1, "    address: host-b.example", kPeerB3}),
                {{4, 14, "peers[0].address", "must be a numeric IPv4 or IPv6 address, got 'host-b.example'"}});
}

TEST_CASE("a bad tunnel address", "[config][errors]") {
  expect_errors(lines({kNode, "tunnel:", "  address: 10.0.0.300"}), {{3, 12, "tunnel.address", "got '10.0.0.300'"}});
}

TEST_CASE("an invalid listener target endpoint", "[config][errors]") {
  expect_errors(
      lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
             "    listen: tcp:127.0.0.1:6380", "    peer: host-b", "    target: tcp:127.0.0.1"}),
      {{10, 13, "listeners[0].target", "invalid endpoint 'tcp:127.0.0.1': '127.0.0.1' must look like IP:PORT"}});
}

TEST_CASE("an invalid listen endpoint scheme", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
                       "    listen: udp:127.0.0.1:6380", "    peer: host-b", "    target: tcp:127.0.0.1:6379"}),
                {{8, 13, "listeners[0].listen", "must start with tcp: or unix:"}});
}

TEST_CASE("an unknown peer reference", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
                       "    listen: tcp:127.0.0.1:6380", "    peer: host-c", "    target: tcp:127.0.0.1:6379"}),
                {{9, 11, "listeners[0].peer", "unknown peer 'host-c'; defined peers: host-b"}});
  expect_errors(lines({kNode, "listeners:", "  - name: redis", "    listen: tcp:127.0.0.1:6380", "    peer: host-c",
                       "    target: tcp:127.0.0.1:6379"}),
                {{5, 11, "listeners[0].peer", "no peers are defined"}});
}

TEST_CASE("duplicate peer names", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "  - name: host-b", "    address: 10.0.0.3",
                       "    tcp_port: 7481"}),
                {{6, 11, "peers[1].name", "duplicate peer name 'host-b' (also peers[0])"}});
}

TEST_CASE("duplicate listener names", "[config][errors]") {
  expect_errors(
      lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
             "    listen: tcp:127.0.0.1:6380", "    peer: host-b", "    target: tcp:127.0.0.1:6379", "  - name: redis",
             "    listen: tcp:127.0.0.1:6381", "    peer: host-b", "    target: tcp:127.0.0.1:6379"}),
      {{11, 11, "listeners[1].name", "duplicate listener name 'redis' (also listeners[0])"}});
}

TEST_CASE("duplicate listen addresses compare canonically", "[config][errors]") {
  expect_errors(
      lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: one", "    listen: tcp:[::1]:6380",
             "    peer: host-b", "    target: tcp:127.0.0.1:6379", "  - name: two", "    listen: tcp:[0:0::1]:6380",
             "    peer: host-b", "    target: tcp:127.0.0.1:6379"}),
      {{12, 13, "listeners[1].listen", "'tcp:[0:0::1]:6380' is already the listen address of listeners[0] (one)"}});
}

TEST_CASE("a listener on the tunnel's own listen address", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
                       "    listen: tcp:127.0.0.1:7471", "    peer: host-b", "    target: tcp:127.0.0.1:6379"}),
                {{8, 13, "listeners[0].listen", "tunnel's own listen address"}});
}

TEST_CASE("admin clashing with a listener", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, kPeerB1, kPeerB2, kPeerB3, "listeners:", "  - name: redis",
                       "    listen: tcp:127.0.0.1:6380", "    peer: host-b", "    target: tcp:127.0.0.1:6379",
                       "admin: 127.0.0.1:6380"}),
                {{11, 8, "admin", "is also the listen address of listeners[0] (redis)"}});
}

TEST_CASE("an invalid admin address", "[config][errors]") {
  expect_errors(lines({kNode, "admin: localhost:9901"}), {{2, 8, "admin", "invalid address 'localhost:9901'"}});
  expect_errors(lines({kNode, "admin: 9901"}), {{2, 8, "admin", "invalid address '9901'"}});
}

TEST_CASE("transport_mode_name spells each mode as the YAML does, and parses back", "[config]") {
  CHECK(rdmagw::transport_mode_name(TransportMode::kAuto) == "auto");
  CHECK(rdmagw::transport_mode_name(TransportMode::kRdma) == "rdma");
  CHECK(rdmagw::transport_mode_name(TransportMode::kTcp) == "tcp");
  for (TransportMode m : {TransportMode::kAuto, TransportMode::kRdma, TransportMode::kTcp}) {
    std::string text = "node: a\ntunnel:\n  transport: " + std::string(rdmagw::transport_mode_name(m)) + "\n";
    CHECK(parse_config_ok(text)->tunnel.transport == m);
  }
}

TEST_CASE("a transport change is named with the YAML spelling when a reload refuses it", "[config]") {
  auto running = parse_config_ok(lines({"node: a", "tunnel:", "  transport: tcp"}));
  auto next = parse_config_ok(lines({"node: a", "tunnel:", "  transport: rdma"}));
  CHECK(rdmagw::restart_only_changes(*running, *next) == std::vector<std::string>{"tunnel.transport: tcp -> rdma"});
}

TEST_CASE("an invalid transport value", "[config][errors]") {
  expect_errors(lines({kNode, "tunnel:", "  transport: roce"}),
                {{3, 14, "tunnel.transport", "must be one of auto, rdma, tcp, got 'roce'"}});
}

TEST_CASE("tcp_port equal to rdma_port while RDMA may be used", "[config][errors]") {
  expect_errors(lines({kNode, "tunnel:", "  tcp_port: 7000", "  rdma_port: 7000"}),
                {{4, 14, "tunnel.rdma_port", "tcp_port and rdma_port are both 7000"}});
}

TEST_CASE("workers out of range", "[config][errors]") {
  expect_errors(lines({kNode, "workers: 0"}), {{2, 10, "workers", "must be between 1 and 256, got 0"}});
  expect_errors(lines({kNode, "workers: 257"}), {{2, 10, "workers", "got 257"}});
  expect_errors(lines({kNode, "workers: -2"}), {{2, 10, "workers", "got -2"}});
}

TEST_CASE("timeouts out of range", "[config][errors]") {
  expect_errors(lines({kNode, "shutdown_timeout_ms: 600001"}),
                {{2, 22, "shutdown_timeout_ms", "must be between 0 and 600000, got 600001"}});
  expect_errors(lines({kNode, "tunnel:", "  connect_timeout_ms: 99"}),
                {{3, 23, "tunnel.connect_timeout_ms", "must be between 100 and 600000, got 99"}});
  expect_errors(lines({kNode, "tunnel:", "  keepalive_interval_ms: 3600001"}),
                {{3, 26, "tunnel.keepalive_interval_ms", "must be between 100 and 3600000"}});
  expect_errors(lines({kNode, "tunnel:", "  rdma_probe_interval_ms: 600001"}),
                {{3, 27, "tunnel.rdma_probe_interval_ms", "must be between 0 and 600000, got 600001"}});
  CHECK(parse_config_ok(lines({kNode, "tunnel:", "  rdma_probe_interval_ms: 0"}))->tunnel.rdma_probe_interval_ms == 0);
}

TEST_CASE("stream_window smaller than buffer_size", "[config][errors]") {
  expect_errors(lines({kNode, "tunnel:", "  buffer_size: 64KiB", "  stream_window: 32KiB"}),
                {{4, 18, "tunnel.stream_window", "stream_window 32KiB must be at least buffer_size 64KiB"}});
  // With the window left at its default, the error is at the key that was given.
  expect_errors(lines({kNode, "tunnel:", "  buffer_size: 1MiB"}),
                {{3, 16, "tunnel.buffer_size", "stream_window 256KiB (default) must be at least buffer_size 1MiB"}});
}

TEST_CASE("session_budget smaller than stream_window", "[config][errors]") {
  expect_errors(
      lines({kNode, "tunnel:", "  session_budget: 128KiB"}),
      {{3, 19, "tunnel.session_budget", "session_budget 128KiB must be at least stream_window 256KiB (default)"}});
}

TEST_CASE("keepalive timeout not above the interval", "[config][errors]") {
  expect_errors(lines({kNode, "tunnel:", "  keepalive_timeout_ms: 5000"}),
                {{3, 25, "tunnel.keepalive_timeout_ms",
                  "keepalive_timeout_ms 5000 must be greater than keepalive_interval_ms 5000 (default)"}});
}

TEST_CASE("a bad allowlist entry", "[config][errors]") {
  expect_errors(lines({kNode, "targets:", "  - tcp:127.0.0.1:6379", "  - unix:redis.sock"}),
                {{4, 5, "targets[1]", "unix socket path 'redis.sock' must be absolute"}});
  expect_errors(lines({kNode, "targets: tcp:127.0.0.1:6379"}),
                {{2, 10, "targets", "must be a list, got 'tcp:127.0.0.1:6379'"}});
}

TEST_CASE("an invalid log level", "[config][errors]") {
  expect_errors(lines({kNode, "log_level: verbose"}),
                {{2, 12, "log_level", "must be one of debug, info, warn, error, got 'verbose'"}});
}

TEST_CASE("list items and sections of the wrong shape", "[config][errors]") {
  expect_errors(lines({kNode, kPeers, "  - host-b"}), {{3, 5, "peers[0]", "must be a mapping, got 'host-b'"}});
  expect_errors(lines({kNode, "peers:", "  host-b: 1"}), {{3, 3, "peers", "must be a list, got a mapping"}});
  expect_errors(lines({kNode, "tunnel: 7471"}), {{2, 9, "tunnel", "must be a mapping, got '7471'"}});
}

TEST_CASE("YAML syntax error reports the parser's position", "[config][errors]") {
  expect_errors(lines({"node: host-a", "tunnel:", "  tcp_port: 1", "    rdma_port: 2"}),
                {{4, 14, "(yaml)", "syntax error: illegal map value"}});
}

// yaml-cpp says where it gave up on a flow never closed: the next key, or
// the end of the file. The error points at the bracket instead, under its key.
TEST_CASE("YAML: a '{' or '[' never closed is reported where it opened, under its key", "[config][errors]") {
  expect_errors(lines({"node: host-a", "peers: [a,"}),
                {{2, 8, "peers", "syntax error: this '[' is never closed (the parser gave up at 3:1"}});
  expect_errors(lines({"node: a", "listeners:", "  - {name: x, listen: \"tcp:127.0.0.1:1\", peer: b", "peers: []"}),
                {{3, 5, "listeners[]", "this '{' is never closed (the parser gave up at 4:6: end of map flow"}});
  // Nested in a list item whose own key is a sibling; brackets in quotes
  // and comments do not count.
  expect_errors(lines({"node: a # {", "listeners:", "  - name: x", "    routes: [ {match: \"a{\", peer: b} "}),
                {{4, 13, "listeners[].routes", "this '[' is never closed"}});
  expect_errors(lines({"node: a", "tunnel:", "  peer_cidrs:", "    - {cidr: 10.0.0.0/8", "  address: 1.2.3.4"}),
                {{4, 7, "tunnel.peer_cidrs[]", "this '{' is never closed"}});
}

TEST_CASE("empty file and non-mapping top level", "[config][errors]") {
  expect_errors("", {{1, 1, "(root)", "the configuration is empty"}});
  expect_errors(lines({"# only a comment", ""}), {{1, 1, "(root)", "the configuration is empty"}});
  expect_errors(lines({"- node: host-a"}), {{1, 1, "(root)", "must be a mapping of configuration keys, got a list"}});
  expect_errors(lines({"host-a"}), {{1, 1, "(root)", "got 'host-a'"}});
}

TEST_CASE("more than one YAML document", "[config][errors]") {
  expect_errors(lines({"node: a", "---", "node: b"}), {{3, 1, "(root)", "only one YAML document"}});
}

TEST_CASE("several errors are all reported, in file order", "[config][errors]") {
  expect_errors(lines({
                    "node: \"\"",                      // 1
                    "workers: many",                   // 2
                    "tunnel:",                         // 3
                    "  transport: fast",               // 4
                    "  bogus: 1",                      // 5
                    "peers:",                          // 6
                    "  - name: host-b",                // 7
                    "    address: 10.0.0.256",         // 8
                    "    tcp_port: 7481",              // 9
                    "listeners:",                      // 10
                    "  - name: redis",                 // 11
                    "    listen: tcp:127.0.0.1:6380",  // 12
                    "    peer: host-c",                // 13
                    "    target: tcp:127.0.0.1:6379",  // 14
                    "  - listen: tcp:127.0.0.1:6380",  // 15
                    "    peer: host-b",                // 16
                    "    target: tcp:127.0.0.1:6379",  // 17
                    "log_level: loud",                 // 18
                }),
                {
                    {1, 7, "node", "must be a non-empty string, got ''"},
                    {2, 10, "workers", "must be an integer, got 'many'"},
                    {4, 14, "tunnel.transport", "got 'fast'"},
                    {5, 3, "tunnel.bogus", "unknown key 'bogus'"},
                    {8, 14, "peers[0].address", "got '10.0.0.256'"},
                    {13, 11, "listeners[0].peer", "unknown peer 'host-c'"},
                    {15, 5, "listeners[1].name", "required key 'name' is missing"},
                    {15, 13, "listeners[1].listen", "already the listen address of listeners[0] (redis)"},
                    {18, 12, "log_level", "got 'loud'"},
                });
}

// ---------------------------------------------------------------------------
// Files

TEST_CASE("load_config_file: unreadable files", "[config][errors]") {
  ConfigResult r = load_config_file("/nonexistent-dir/rdmagw.yaml");
  REQUIRE(r.errors.size() == 1);
  CHECK(r.config == nullptr);
  CHECK(r.errors[0].to_string() == "/nonexistent-dir/rdmagw.yaml:0:0: (file): cannot open: No such file or directory");

  r = load_config_file("/");
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].to_string() == "/:0:0: (file): not a regular file (a directory)");
}

// A FIFO or a device at the config path would block the read (a reload by
// SIGHUP hung for good, and SIGTERM with it): refused at once.
TEST_CASE("load_config_file: a FIFO, a device or a huge file is refused without reading it", "[config][errors]") {
  char dir[] = "/tmp/rdmagw-config-test-XXXXXX";
  REQUIRE(mkdtemp(dir));
  std::string fifo = std::string(dir) + "/fifo.yaml";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  ConfigResult r = load_config_file(fifo);  // no writer: a blocking open or read would never return
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].to_string() == fifo + ":0:0: (file): not a regular file (a FIFO)");

  std::string zero = std::string(dir) + "/zero.yaml";
  REQUIRE(symlink("/dev/zero", zero.c_str()) == 0);
  r = load_config_file(zero);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].to_string() == zero + ":0:0: (file): not a regular file (a character device)");

  std::string big = std::string(dir) + "/big.yaml";
  {
    std::ofstream out(big);
    out << "node: host-a\n# " << std::string(rdmagw::kMaxConfigFileBytes, 'x') << "\n";
  }
  r = load_config_file(big);
  REQUIRE(r.errors.size() == 1);
  CHECK_THAT(r.errors[0].to_string(), Catch::Contains("bytes; at most 4194304 are read"));
  for (const std::string& f : {fifo, zero, big}) unlink(f.c_str());
  rmdir(dir);
}

TEST_CASE("load_config_file: reads a file and names it in errors", "[config]") {
  char path[] = "/tmp/rdmagw-config-test-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream out(path);
    out << "node: host-a\nlog_level: warn\n";
  }
  ConfigResult r = load_config_file(path);
  INFO(error_lines(r));
  REQUIRE(r.config);
  CHECK(r.config->source_file == path);
  CHECK(r.config->log_level == "warn");

  {
    std::ofstream out(path, std::ios::trunc);
    out << "node: host-a\nlog_level: loud\n";
  }
  r = load_config_file(path);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].to_string() == std::string(path) +
                                       ":2:12: log_level: must be one of debug, info, warn, error, "
                                       "got 'loud'");
  std::remove(path);
}

TEST_CASE("tunnel.rdma: values are read, defaults apply") {
  ConfigResult r = parse_config_text(lines({
                                         "node: a",
                                         "tunnel:",
                                         "  transport: rdma",
                                         "  rdma:",
                                         "    device: erdma_0",
                                         "    slab_size: 256MiB",
                                         "    recv_depth: 64",
                                         "    busy_poll_us: 10",
                                     }),
                                     "test.yaml");
  INFO(error_lines(r));
  REQUIRE(r.config);
  const auto& rdma = r.config->tunnel.rdma;
  CHECK(rdma.device == "erdma_0");
  CHECK(rdma.slab_size == 256ull << 20);
  CHECK(rdma.recv_depth == 64);
  CHECK(rdma.send_depth == 256);  // default
  CHECK(rdma.busy_poll_us == 10);
  CHECK(rdma.inline_threshold == 96);  // default: eRDMA's maximum
}

TEST_CASE("tunnel.rdma: unknown keys, out-of-range values and a slab too small are reported in place") {
  expect_errors(
      lines({
          "node: a",
          "tunnel:",
          "  rdma:",
          "    inline_threshold: 128",
          "    srq: true",
      }),
      {{4, 23, "tunnel.rdma.inline_threshold", "between 0 and 96"}, {5, 5, "tunnel.rdma.srq", "unknown key"}});
  expect_errors(lines({
                    "node: a",
                    "tunnel:",
                    "  rdma:",
                    "    slab_size: 4MiB",
                }),
                {{4, 16, "tunnel.rdma.slab_size", "too small"}});
}

TEST_CASE("tunnel.rdma.max_pinned: half the slab by default; checked against the slab and one session") {
  constexpr uint64_t kStride = 32768 + 512;
  auto c = parse_config_ok(lines({kNode, "tunnel:", "  rdma:", "    slab_size: 256MiB"}));
  const auto& rdma = c->tunnel.rdma;
  CHECK(rdma.max_pinned == 0);  // not set: the default applies
  CHECK(rdma.pinned_budget(kStride) == 128ull << 20);
  CHECK(rdma.session_limit(kStride) == (128ull << 20) / (kStride * 64));  // 63 sessions of 64 receives
  // The smallest slab holds 4 sessions' receives: half of it, 2.
  auto small = parse_config_ok(lines({kNode, "tunnel:", "  rdma:", "    slab_size: 9MiB"}));
  CHECK(small->tunnel.rdma.session_limit(kStride) == 2);
  auto set = parse_config_ok(lines({kNode, "tunnel:", "  rdma:", "    max_pinned: 8MiB", "    recv_depth: 32"}));
  CHECK(set->tunnel.rdma.max_pinned == 8ull << 20);
  CHECK(set->tunnel.rdma.session_limit(kStride) == (8ull << 20) / (kStride * 32));  // 7
  expect_errors(lines({kNode, "tunnel:", "  rdma:", "    slab_size: 64MiB", "    max_pinned: 65MiB"}),
                {{5, 17, "tunnel.rdma.max_pinned", "more than slab_size"}});
  expect_errors(lines({kNode, "tunnel:", "  rdma:", "    max_pinned: 1MiB"}),
                {{4, 17, "tunnel.rdma.max_pinned", "too small for one session"}});
}

TEST_CASE("transparent listeners: routes are read in order with their actions") {
  ConfigResult r = parse_config_text(lines({
                                         "node: a",
                                         "peers:",
                                         "  - {name: host-b, address: 10.0.0.2, tcp_port: 7471}",
                                         "listeners:",
                                         "  - name: outbound",
                                         "    listen: transparent:127.0.0.1:15001",
                                         "    routes:",
                                         "      - match: 10.1.0.0/16:6379",
                                         "        peer: host-b",
                                         "      - match: 10.2.0.5:8000-8100",
                                         "        peer: host-b",
                                         "        target: tcp:127.0.0.1:8080",
                                         "      - match: 0.0.0.0/0",
                                         "        action: passthrough",
                                     }),
                                     "test.yaml");
  INFO(error_lines(r));
  REQUIRE(r.config);
  const auto& l = r.config->listeners.at(0);
  CHECK(l.transparent);
  CHECK(l.listen.to_string() == "tcp:127.0.0.1:15001");
  REQUIRE(l.routes.size() == 3);
  CHECK(l.routes[0].action == rdmagw::RouteConfig::Action::kTunnel);
  CHECK(l.routes[0].peer == "host-b");
  CHECK_FALSE(l.routes[0].has_target);
  CHECK(l.routes[1].has_target);
  CHECK(l.routes[1].target.to_string() == "tcp:127.0.0.1:8080");
  CHECK(l.routes[1].match.port_lo == 8000);
  CHECK(l.routes[1].match.port_hi == 8100);
  CHECK(l.routes[2].action == rdmagw::RouteConfig::Action::kPassthrough);
}

TEST_CASE("transparent listeners: every route mistake is reported in place") {
  expect_errors(lines({
                    "node: a",
                    "peers:",
                    "  - {name: host-b, address: 10.0.0.2, tcp_port: 7471}",
                    "listeners:",
                    "  - name: outbound",
                    "    listen: transparent:127.0.0.1:15001",
                    "    peer: host-b",
                    "    routes:",
                    "      - match: 10.1.0.0/33",
                    "        peer: host-x",
                    "      - match: 10.2.0.5",
                    "        action: reject",
                    "        target: tcp:127.0.0.1:1",
                    "      - action: passthrough",
                    "  - name: plain",
                    "    listen: tcp:127.0.0.1:6000",
                    "    peer: host-b",
                    "    target: tcp:127.0.0.1:1",
                    "    routes: []",
                }),
                {{7, 11, "listeners[0].peer", "not used by a transparent listener"},
                 {9, 16, "listeners[0].routes[0].match", "prefix length"},
                 {10, 15, "listeners[0].routes[0].peer", "unknown peer 'host-x'"},
                 {13, 17, "listeners[0].routes[1].target", "makes no sense with action 'reject'"},
                 {14, 9, "listeners[0].routes[2].match", "required key 'match' is missing"},
                 {19, 13, "listeners[1].routes", "need a transparent listener"}});
}

TEST_CASE("services: action service routes by services.file, and its mistakes are reported in place") {
  ConfigResult r = parse_config_text(lines({
                                         "node: a",
                                         "services: {file: /run/rdmagw-k8s/services.json}",
                                         "listeners:",
                                         "  - name: outbound",
                                         "    listen: transparent:127.0.0.1:15001",
                                         "    routes:",
                                         "      - {match: 10.96.0.0/12, action: service}",
                                         "      - {match: 0.0.0.0/0, action: passthrough}",
                                     }),
                                     "test.yaml");
  INFO(error_lines(r));
  REQUIRE(r.config);
  CHECK(r.config->services.file == "/run/rdmagw-k8s/services.json");
  CHECK(r.config->listeners.at(0).routes.at(0).action == rdmagw::RouteConfig::Action::kService);

  expect_errors(lines({
                    "node: a",
                    "listeners:",
                    "  - name: outbound",
                    "    listen: transparent:127.0.0.1:15001",
                    "    routes:",
                    "      - {match: 10.96.0.0/12, action: service}",
                }),
                {{6, 39, "listeners[0].routes[0].action", "action service needs services.file"}});
  expect_errors(lines({
                    "node: a",
                    "services: {file: services.json}",
                    "peers:",
                    "  - {name: host-b, address: 10.0.0.2, tcp_port: 7471}",
                    "listeners:",
                    "  - name: outbound",
                    "    listen: transparent:127.0.0.1:15001",
                    "    routes:",
                    "      - {match: 10.96.0.0/12, action: service, peer: host-b}",
                }),
                {{2, 18, "services.file", "must be an absolute path, got 'services.json'"},
                 {9, 39, "listeners[0].routes[0].action", "action service needs services.file"},
                 {9, 54, "listeners[0].routes[0].peer", "makes no sense with action 'service'"}});
  expect_errors(lines({"node: a", "services: {}"}), {{2, 11, "services.file", "required key 'file' is missing"}});
}

TEST_CASE("fleet: peer_cidrs, peer: destination, connect, session_idle_ms and max_sessions", "[config][fleet]") {
  auto c = parse_config_ok(lines({
      "node: a",
      "tunnel:",
      "  tcp_port: 7000",
      "  rdma_port: 7001",
      "  session_idle_ms: 60000",
      "  max_sessions: 64",
      "  sessions_per_peer: 1",
      "  peer_cidrs:",
      "    - 10.1.0.0/16",
      "    - {cidr: 10.2.0.0/24, tcp_port: 17471}",
      "    - {cidr: 'fd00::/64', tcp_port: 1, rdma_port: 2}",
      "  auth: {mode: none}",
      "peers:",
      "  - {name: b, address: 10.9.0.2, tcp_port: 7471, connect: always}",
      "  - {name: c, address: 10.9.0.3, tcp_port: 7471}",
      "listeners:",
      "  - name: out",
      "    listen: transparent:127.0.0.1:15001",
      "    routes:",
      "      - {match: '10.1.0.0/16:6379', peer: destination}",
      "      - {match: '10.2.0.0/16', peer: destination}",
      "      - {match: '10.9.0.0/16', peer: b}",
  }));
  const auto& t = c->tunnel;
  CHECK(t.session_idle_ms == 60000);
  CHECK(t.max_sessions == 64);
  CHECK(t.sessions_per_peer == 1);
  REQUIRE(t.peer_cidrs.size() == 3);
  CHECK(t.peer_cidrs[0].cidr.to_string() == "10.1.0.0/16");
  CHECK(t.peer_cidrs[0].tcp_port == 7000);  // the tunnel's own ports by default
  CHECK(t.peer_cidrs[0].rdma_port == 7001);
  CHECK(t.peer_cidrs[1].tcp_port == 17471);
  CHECK(t.peer_cidrs[1].rdma_port == 7001);
  CHECK(t.peer_cidrs[2].rdma_port == 2);
  CHECK(c->peers[0].always_connected);
  CHECK_FALSE(c->peers[1].always_connected);  // on_demand is the default
  const auto& routes = c->listeners.at(0).routes;
  CHECK(routes[0].by_destination);
  CHECK(routes[0].peer.empty());
  CHECK(routes[1].by_destination);  // overlaps 10.2.0.0/24: each destination is checked when it comes
  CHECK_FALSE(routes[2].by_destination);
  CHECK(routes[2].peer == "b");
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(6379);
  inet_pton(AF_INET, "10.2.0.77", &in.sin_addr);
  REQUIRE(c->find_peer_cidr(reinterpret_cast<sockaddr*>(&in)) == &t.peer_cidrs[1]);
  inet_pton(AF_INET, "10.2.1.77", &in.sin_addr);
  CHECK(c->find_peer_cidr(reinterpret_cast<sockaddr*>(&in)) == nullptr);

  auto defaults = parse_config_ok("node: a\n");
  CHECK(defaults->tunnel.session_idle_ms == 300000);
  CHECK(defaults->tunnel.max_sessions == 1024);
  CHECK(defaults->tunnel.sessions_per_peer == 0);  // every worker may hold one
  CHECK(defaults->tunnel.peer_cidrs.empty());
}

TEST_CASE("fleet: mistakes are reported at their key, and a route never dials outside peer_cidrs",
          "[config][fleet][errors]") {
  expect_errors(lines({
                    "node: a",
                    "tunnel:",
                    "  max_sessions: 0",
                    "  peer_cidrs: ['10.1.0.0/16:80', {tcp_port: 1}, 10.300.0.0/16]",
                    "  sessions_per_peer: 257",
                    "peers:",
                    "  - {name: destination, address: 10.9.0.2, tcp_port: 7471}",
                    "  - {name: b, address: 10.9.0.3, tcp_port: 7471, connect: sometimes}",
                }),
                {{3, 17, "tunnel.max_sessions", "1"},
                 {4, 16, "tunnel.peer_cidrs[0]", "addresses only"},
                 {4, 34, "tunnel.peer_cidrs[1].cidr", "required key 'cidr' is missing"},
                 {4, 49, "tunnel.peer_cidrs[2]", "not a numeric IPv4 address"},
                 {5, 22, "tunnel.sessions_per_peer", "256"},
                 {7, 12, "peers[0].name", "is reserved"},
                 {8, 59, "peers[1].connect", "on_demand"}});
  expect_errors(lines({
                    "node: a",
                    "listeners:",
                    "  - name: out",
                    "    listen: transparent:127.0.0.1:15001",
                    "    routes: [{match: 10.1.0.0/16, peer: destination}]",
                }),
                {{5, 41, "listeners[0].routes[0].peer", "needs tunnel.peer_cidrs"}});
  expect_errors(lines({
                    "node: a",
                    "tunnel: {peer_cidrs: [10.1.0.0/16]}",
                    "listeners:",
                    "  - name: out",
                    "    listen: transparent:127.0.0.1:15001",
                    "    routes: [{match: 0.0.0.0/0, peer: destination}, {match: 10.2.0.0/16, peer: destination}]",
                }),
                {{6, 80, "listeners[0].routes[1].peer", "outside every tunnel.peer_cidrs entry"}});
}

TEST_CASE("worker_cpus and tunnel.rdma_share", "[config]") {
  auto c = parse_config_ok(lines({"node: a", "workers: 3", "worker_cpus: [0, 1]", "tunnel: {rdma_share: 25}"}));
  CHECK(c->worker_cpus == std::vector<unsigned>{0, 1});
  CHECK(c->tunnel.rdma_share == 25);
  CHECK(parse_config_ok("node: a\n")->tunnel.rdma_share == 100);
  CHECK(parse_config_ok("node: a\n")->worker_cpus.empty());
  expect_errors(lines({"node: a", "worker_cpus: []", "tunnel: {rdma_share: 101}"}),
                {{2, 14, "worker_cpus", "empty list"}, {3, 22, "tunnel.rdma_share", "between 0 and 100"}});
  expect_errors(lines({"node: a", "worker_cpus: [0, 1024, x]"}),
                {{2, 18, "worker_cpus[1]", "1023"}, {2, 24, "worker_cpus[2]", "integer"}});
}

TEST_CASE("text on which yaml-cpp's LoadAll never returns is refused at once (found by tests/fuzz)",
          "[config][errors]") {
  // yaml-cpp 0.7 yields empty documents forever for these, without consuming
  // anything: rdmagw --check on the first of them never returned.
  for (const char* text : {", a\n", ", a: 1}\n", "node: a\n, b\n"}) {
    ConfigResult r = parse_config_text(text, "hang.yaml");
    INFO(text << "\n" << error_lines(r));
    CHECK(r.config == nullptr);
    CHECK_FALSE(r.errors.empty());
  }
  // A second document is still found and refused; a trailing '---' is not one.
  ConfigResult two = parse_config_text("node: a\n---\nnode: b\n", "two.yaml");
  REQUIRE(two.errors.size() == 1);
  CHECK(two.errors[0].line == 3);  // where its content begins
  CHECK(parse_config_text("node: a\n---\n", "trailing.yaml").errors.empty());
}

TEST_CASE("tunnel.limits: defaults, values, and the per-address limit within the total", "[config]") {
  auto d = parse_config_ok(lines({kNode}));
  CHECK(d->tunnel.limits.handshakes == 256);
  CHECK(d->tunnel.limits.handshakes_per_address == 32);
  CHECK(d->tunnel.limits.streams_per_session == 16384);
  CHECK(d->tunnel.limits.opens_per_second == 20000);
  CHECK(d->tunnel.limits.sessions_per_address == 32);
  auto c =
      parse_config_ok(lines({kNode, "tunnel:", "  limits:", "    handshakes: 8", "    handshakes_per_address: 8",
                             "    streams_per_session: 0", "    opens_per_second: 0", "    sessions_per_address: 2"}));
  CHECK(c->tunnel.limits.handshakes == 8);
  CHECK(c->tunnel.limits.handshakes_per_address == 8);
  CHECK(c->tunnel.limits.streams_per_session == 0);
  CHECK(c->tunnel.limits.opens_per_second == 0);
  CHECK(c->tunnel.limits.sessions_per_address == 2);
  expect_errors(lines({kNode, "tunnel:", "  limits:", "    handshakes: 0"}),
                {{4, 17, "tunnel.limits.handshakes", "must be between 1 and 65536, got 0"}});
  expect_errors(lines({kNode, "tunnel:", "  limits:", "    handshakes: 16"}),
                {{4, 17, "tunnel.limits.handshakes", "handshakes_per_address 32 must be at most handshakes 16"}});
  expect_errors(
      lines({kNode, "tunnel:", "  limits:", "    handshakes_per_address: 300"}),
      {{4, 29, "tunnel.limits.handshakes_per_address", "handshakes_per_address 300 must be at most handshakes 256"}});
  expect_errors(lines({kNode, "tunnel:", "  limits:", "    streams: 5"}),
                {{4, 5, "tunnel.limits.streams", "unknown key"}});
}

TEST_CASE("listeners[].socket_mode: unix listeners only, three octal digits", "[config]") {
  auto unix_listener = [](const char* mode_line) {
    return lines({kNode, "peers:", "  - name: b", "    address: 10.0.0.2", "    tcp_port: 7471",
                  "listeners:", "  - name: r", "    listen: unix:/run/rdmagw/r.sock", "    peer: b",
                  "    target: tcp:127.0.0.1:6379", mode_line});
  };
  auto plain = parse_config_ok(unix_listener("    socket_mode: 0666"));
  CHECK(plain->listeners[0].socket_mode == 0666);
  CHECK(parse_config_ok(unix_listener("    socket_mode: \"660\""))->listeners[0].socket_mode == 0660);
  CHECK(parse_config_ok(unix_listener(""))->listeners[0].socket_mode == 0);
  expect_errors(unix_listener("    socket_mode: 0868"),
                {{11, 18, "listeners[0].socket_mode", "'0868': not a file mode"}});
  expect_errors(unix_listener("    socket_mode: 01777"), {{11, 18, "listeners[0].socket_mode", "not a file mode"}});
  expect_errors(unix_listener("    socket_mode: 000"), {{11, 18, "listeners[0].socket_mode", "nobody could connect"}});
  expect_errors(lines({kNode, "peers:", "  - name: b", "    address: 10.0.0.2", "    tcp_port: 7471",
                       "listeners:", "  - name: r", "    listen: tcp:127.0.0.1:6380", "    peer: b",
                       "    target: tcp:127.0.0.1:6379", "    socket_mode: 0660"}),
                {{11, 18, "listeners[0].socket_mode", "applies to unix: listeners only"}});
}

TEST_CASE("tunnel.tcp_splice: off by default, on when asked, a bad value named, a change needs a restart", "[config]") {
  CHECK_FALSE(parse_config_ok(lines({"node: a"}))->tunnel.tcp_splice);
  auto on = parse_config_ok(lines({"node: a", "tunnel:", "  tcp_splice: true"}));
  CHECK(on->tunnel.tcp_splice);
  CHECK_FALSE(parse_config_ok(lines({"node: a", "tunnel:", "  tcp_splice: false"}))->tunnel.tcp_splice);
  expect_errors(lines({kNode, "tunnel:", "  tcp_splice: sometimes"}),
                {{3, 15, "tunnel.tcp_splice", "must be one of true, false, got 'sometimes'"}});
  // Authenticated records are opened in user space: splice would do nothing.
  expect_errors(lines({kNode, "tunnel:", "  tcp_splice: true", "  auth: {mode: psk, key_files: [/k]}"}),
                {{3, 15, "tunnel.tcp_splice", "true does nothing with tunnel.auth.mode psk"}});
  auto off = parse_config_ok(lines({"node: a"}));
  CHECK(rdmagw::restart_only_changes(*off, *on) == std::vector<std::string>{"tunnel.tcp_splice: false -> true"});
}
