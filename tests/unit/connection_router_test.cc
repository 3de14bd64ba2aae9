// SPDX-License-Identifier: Apache-2.0
// Where an accepted connection goes (proxy/runtime/connection_router.h), on
// real loopback sockets: a listener's clients, max_connections and
// accepts_per_second refusing with a reset; a transparent listener's routes
// in order (reject, a named peer, a peer found by destination, a Service);
// a connection with no original destination, or made straight to the
// listener. Original destinations come from the test (in rdmagw: iptables or
// the connect4 program), peers dial through a fake connector, and the
// worker's hand-over is the test's: nothing leaves this host's loopback.
#include "proxy/runtime/connection_router.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "fake_connector.h"
#include "proxy/local/access_log.h"
#include "test_support.h"

using namespace rdmagw;
using Catch::Matchers::Contains;
using rdmagw::test::FakeConnector;
using rdmagw::test::TempDir;
using tunnel::TransportKind;

namespace {

const char* const kConfig = R"(node: host-a
tunnel:
  transport: tcp
  peer_cidrs: [10.244.0.0/16]
services: {file: /run/rdmagw-k8s/services.json}
peers:
  - {name: b, address: 127.0.0.2, tcp_port: 17471}
listeners:
  - {name: app, listen: "tcp:127.0.0.1:16380", peer: b, target: "tcp:127.0.0.1:6379"}
  - {name: only-ten, listen: "tcp:127.0.0.1:16381", peer: b, target: "tcp:127.0.0.1:6379", clients: [10.0.0.0/8]}
  - {name: one-at-a-time, listen: "tcp:127.0.0.1:16382", peer: b, target: "tcp:127.0.0.1:6379", max_connections: 1}
  - {name: one-a-second, listen: "tcp:127.0.0.1:16383", peer: b, target: "tcp:127.0.0.1:6379", accepts_per_second: 1}
  - name: outbound
    listen: transparent:127.0.0.1:15001
    routes:
      - {match: 10.1.0.5/32, action: reject}
      - {match: 10.96.0.0/16, action: service}
      - {match: 10.1.0.0/16, peer: b}
      - {match: 10.2.0.0/16, peer: b, target: "tcp:127.0.0.1:8080"}
      - {match: 10.244.0.0/16, peer: destination}
)";

// A Service at 10.96.0.10:80 with one ready endpoint whose pod has rdmagw,
// and one at 10.96.0.11:80 with none ready.
const char* const kServices = R"({
 "format": "rdmagw-services/1",
 "api": {"reachable": true},
 "services": [
  {"namespace": "default", "name": "echo", "cluster_ips": ["10.96.0.10"],
   "ports": [{"port": 80, "endpoints": [
     {"address": "10.244.1.5", "port": 8000, "state": "ready", "rdmagw": true}]}]},
  {"namespace": "default", "name": "gone", "cluster_ips": ["10.96.0.11"],
   "ports": [{"port": 80, "endpoints": [
     {"address": "10.244.1.6", "port": 8000, "state": "not-ready", "rdmagw": true}]}]}
 ]
})";

sockaddr_storage ipv4(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  REQUIRE(inet_pton(AF_INET, ip, &in->sin_addr) == 1);
  return ss;
}

uint16_t local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

// What the worker was handed (ConnectionRouter::HandOver).
struct Handed {
  std::string peer, listener, target, destination;
  bool has_direct = false;
  UniqueFd fd;
  local::ListenerTerms terms;
};

struct Rig {
  BufferPool pool{tunnel::kBufferHeadroom + 16384, 64};
  EventLoop loop;  // not initialized: nothing here submits I/O
  metrics::WorkerMetrics metrics;
  FakeConnector tcp{TransportKind::kTcp};
  tunnel::SessionSettings settings;
  SessionDirectory directory{{nullptr, nullptr}};
  std::shared_ptr<const Config> config;
  TempDir dir{"rdmagw-router"};
  local::AccessLogFile access_file;
  local::AccessLog access_log{access_file, metrics, 0};
  local::StreamHost host{loop, pool, metrics, 0, 16384, 1000};
  ServiceRouter services;
  std::unique_ptr<PeerLinks> links;
  std::unique_ptr<PeerTargets> targets;
  std::unique_ptr<ConnectionRouter> router;
  // The test's original destinations, by the client's port.
  std::map<uint16_t, sockaddr_storage> destinations;
  std::vector<Handed> handed;
  std::vector<std::shared_ptr<const ListenerSocket>> sockets;

  Rig() {
    log::set_level(log::Level::kError);
    config = test::parse_config_ok(kConfig);
    settings.node = "host-a";
    settings.metrics = &metrics;
    std::string error;
    REQUIRE(access_file.open(dir.path + "/access.log", &error));
    AccessLogConfig log_config;
    log_config.path = dir.path + "/access.log";
    access_log.configure(log_config, "host-a");
    host.access_log = &access_log;
    std::shared_ptr<const ServiceTable> table;
    REQUIRE(parse_services_file(kServices, &table, &error));
    services.set_table(table);
    links = std::make_unique<PeerLinks>(
        PeerLinks::Wiring{loop, pool, settings, {&tcp, nullptr}, nullptr, directory, 0, metrics}, config);
    targets = std::make_unique<PeerTargets>(PeerTargets::Wiring{loop, host, metrics, services, config},
                                            std::vector<uint16_t>{17471, 17472});
    router = std::make_unique<ConnectionRouter>(ConnectionRouter::Wiring{
        loop, host, metrics, *links, services, config,
        [this](int fd, const ListenerConfig&, sockaddr_storage* out, socklen_t* len, int* error) {
          sockaddr_in client{};
          socklen_t client_len = sizeof(client);
          if (getpeername(fd, reinterpret_cast<sockaddr*>(&client), &client_len) != 0) {
            *error = errno;
            return false;
          }
          auto it = destinations.find(ntohs(client.sin_port));
          if (it == destinations.end()) {
            *error = ENOENT;
            return false;
          }
          *out = it->second;
          *len = sizeof(sockaddr_in);
          return true;
        },
        *targets,
        [this](tunnel::PeerLink& link, UniqueFd& fd, const std::string& listener, const std::string& target,
               local::ListenerTerms& terms, const std::string& destination, const sockaddr_storage* direct) {
          handed.push_back(
              Handed{link.name(), listener, target, destination, direct != nullptr, std::move(fd), std::move(terms)});
          return true;
        }});
    for (const ListenerConfig& l : config->listeners) {
      Endpoint any_port = l.listen;
      reinterpret_cast<sockaddr_in*>(&any_port.addr)->sin_port = 0;  // the kernel picks
      auto fds = ListenFds::open(any_port, 1, &error);
      INFO(error);
      REQUIRE(fds);
      sockets.push_back(std::make_shared<ListenerSocket>(ListenerSocket{l, fds}));
    }
  }
  ~Rig() {
    router.reset();
    targets.reset();
    links.reset();
  }

  const ListenerSocket& socket(const std::string& name) {
    for (const auto& s : sockets)
      if (s->config.name == name) return *s;
    FAIL("no listener " << name);
    throw;
  }

  // A client connects to `listener`; the router is handed what it accepted
  // (with `destination`, for a transparent listener). Returns the client.
  UniqueFd connect_through(const std::string& listener, const sockaddr_storage* destination = nullptr) {
    const ListenerSocket& s = socket(listener);
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(client.valid());
    sockaddr_storage to = ipv4("127.0.0.1", local_port(s.fds->fd_for(0)));
    REQUIRE(::connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof(sockaddr_in)) == 0);
    if (destination) destinations[local_port(client.get())] = *destination;
    UniqueFd accepted(::accept4(s.fds->fd_for(0), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(accepted.valid());
    tunnel::PeerLink* link = s.config.transparent ? nullptr : links->find(s.config.peer);
    router->on_accept(s, metrics.listener(listener), link, std::move(accepted));
    return client;
  }

  std::string access_lines() { return test::read_file(dir.path + "/access.log"); }
};

// What the client's next read says: "reset", "eof", "open" (nothing yet).
// A reset is sent before on_accept() returns (SO_LINGER 0 on loopback), so
// a short wait tells it apart from a connection left open.
std::string client_sees(const UniqueFd& client) {
  pollfd p{client.get(), POLLIN, 0};
  if (::poll(&p, 1, 200) != 1) return "open";
  char byte;
  ssize_t n = ::recv(client.get(), &byte, 1, MSG_DONTWAIT);
  if (n == 0) return "eof";
  if (n < 0 && errno == ECONNRESET) return "reset";
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return "open";
  return "data";
}

}  // namespace

TEST_CASE("connection router: a listener's connection goes to its peer with its target") {
  Rig rig;
  UniqueFd client = rig.connect_through("app");
  REQUIRE(rig.handed.size() == 1);
  CHECK(rig.handed[0].peer == "b");
  CHECK(rig.handed[0].listener == "app");
  CHECK(rig.handed[0].target == "tcp:127.0.0.1:6379");
  CHECK(rig.handed[0].destination.empty());
  CHECK(rig.handed[0].fd.valid());
  CHECK(client_sees(client) == "open");
}

TEST_CASE("connection router: a client outside the listener's clients is reset, counted and written down") {
  Rig rig;
  UniqueFd client = rig.connect_through("only-ten");
  CHECK(client_sees(client) == "reset");
  CHECK(rig.handed.empty());
  CHECK(rig.metrics.listener("only-ten").accepted.value() == 1);
  CHECK_THAT(rig.access_lines(), Contains("reason=\"client-refused: not among the listener's clients\""));
}

TEST_CASE("connection router: max_connections refuses past the count, and admits again when one ends") {
  Rig rig;
  UniqueFd first = rig.connect_through("one-at-a-time");
  REQUIRE(rig.handed.size() == 1);
  UniqueFd second = rig.connect_through("one-at-a-time");
  CHECK(client_sees(second) == "reset");
  CHECK(rig.handed.size() == 1);
  CHECK(rig.metrics.listener("one-at-a-time").refused_max_connections.value() == 1);
  CHECK_THAT(rig.access_lines(), Contains("reason=\"limit: max_connections\""));
  rig.handed.clear();  // the first connection ends: its place in the count with it
  UniqueFd third = rig.connect_through("one-at-a-time");
  CHECK(rig.handed.size() == 1);
  CHECK(client_sees(third) == "open");
}

TEST_CASE("connection router: accepts_per_second refuses the second accept within the second") {
  Rig rig;
  UniqueFd first = rig.connect_through("one-a-second");
  UniqueFd second = rig.connect_through("one-a-second");
  CHECK(rig.handed.size() == 1);
  CHECK(client_sees(second) == "reset");
  CHECK(rig.metrics.listener("one-a-second").refused_accept_rate.value() == 1);
  CHECK(rig.metrics.listener("one-a-second").refused_max_connections.value() == 0);
}

TEST_CASE("connection router: a transparent listener's routes, the first that matches") {
  Rig rig;
  SECTION("reject") {
    sockaddr_storage to = ipv4("10.1.0.5", 80);
    UniqueFd client = rig.connect_through("outbound", &to);
    CHECK(client_sees(client) == "reset");
    CHECK(rig.handed.empty());
    CHECK_THAT(rig.access_lines(), Contains("rejected: route 10.1.0.5/32 says reject"));
  }
  SECTION("a named peer, to the destination itself") {
    sockaddr_storage to = ipv4("10.1.0.6", 6379);
    UniqueFd client = rig.connect_through("outbound", &to);
    REQUIRE(rig.handed.size() == 1);
    CHECK(rig.handed[0].peer == "b");
    CHECK(rig.handed[0].listener == "outbound");
    CHECK(rig.handed[0].target == "tcp:10.1.0.6:6379");
    CHECK(rig.handed[0].destination == "10.1.0.6:6379");
  }
  SECTION("a named peer, to the route's target") {
    sockaddr_storage to = ipv4("10.2.3.4", 80);
    UniqueFd client = rig.connect_through("outbound", &to);
    REQUIRE(rig.handed.size() == 1);
    CHECK(rig.handed[0].target == "tcp:127.0.0.1:8080");
    CHECK(rig.handed[0].destination == "10.2.3.4:80");
  }
  SECTION("the peer on the destination's host, inside peer_cidrs") {
    sockaddr_storage to = ipv4("10.244.7.8", 9000);
    UniqueFd client = rig.connect_through("outbound", &to);
    REQUIRE(rig.handed.size() == 1);
    CHECK(rig.handed[0].peer == "10.244.7.8");
    CHECK(rig.handed[0].target == "tcp:10.244.7.8:9000");
  }
  SECTION("no route matches") {
    sockaddr_storage to = ipv4("192.168.1.1", 80);
    UniqueFd client = rig.connect_through("outbound", &to);
    CHECK(client_sees(client) == "reset");
    CHECK_THAT(rig.access_lines(), Contains("rejected: no route matches"));
  }
}

TEST_CASE("connection router: a Service's endpoint through its pod's rdmagw; none ready is a reset") {
  Rig rig;
  SECTION("a ready endpoint with rdmagw") {
    sockaddr_storage to = ipv4("10.96.0.10", 80);
    UniqueFd client = rig.connect_through("outbound", &to);
    REQUIRE(rig.handed.size() == 1);
    CHECK(rig.handed[0].peer == "10.244.1.5");
    CHECK(rig.handed[0].target == "tcp:10.244.1.5:8000");
    CHECK(rig.handed[0].destination == "10.96.0.10:80");
    CHECK_FALSE(rig.handed[0].has_direct);  // services.direct without_rdmagw: no way around the tunnel
  }
  SECTION("no ready endpoint") {
    sockaddr_storage to = ipv4("10.96.0.11", 80);
    UniqueFd client = rig.connect_through("outbound", &to);
    CHECK(client_sees(client) == "reset");
    CHECK(rig.handed.empty());
    CHECK_THAT(rig.access_lines(), Contains("rejected: the Service has no ready endpoint (default/gone)"));
  }
  SECTION("not in the table: the next route decides") {
    sockaddr_storage to = ipv4("10.96.9.9", 80);
    UniqueFd client = rig.connect_through("outbound", &to);
    CHECK(client_sees(client) == "reset");
    CHECK_THAT(rig.access_lines(), Contains("rejected: no route matches"));
  }
}

TEST_CASE("connection router: no original destination, or the listener itself as one, is a reset") {
  Rig rig;
  SECTION("none") {
    UniqueFd client = rig.connect_through("outbound");
    CHECK(client_sees(client) == "reset");
    CHECK_THAT(rig.access_lines(), Contains("no original destination (not redirected by iptables?)"));
  }
  SECTION("the listener's own address") {
    const ListenerSocket& s = rig.socket("outbound");
    sockaddr_storage self = ipv4("127.0.0.1", local_port(s.fds->fd_for(0)));
    UniqueFd client = rig.connect_through("outbound", &self);
    CHECK(client_sees(client) == "reset");
    CHECK_THAT(rig.access_lines(), Contains("not redirected: a connection straight to the transparent listener"));
  }
  CHECK(rig.handed.empty());
  CHECK(rig.metrics.listener("outbound").accepted.value() == 1);
}

TEST_CASE("peer targets: rdmagw's own ports on this host are never a target, elsewhere they may be") {
  Rig rig;
  std::string error;
  auto own = parse_endpoint("tcp:127.0.0.1:17471", &error);
  auto other_port = parse_endpoint("tcp:127.0.0.1:6379", &error);
  auto other_host = parse_endpoint("tcp:192.0.2.1:17471", &error);
  REQUIRE(own);
  REQUIRE(other_port);
  REQUIRE(other_host);
  CHECK(rig.targets->own_port_problem(*own) == "tcp:127.0.0.1:17471 is rdmagw's own admin or tunnel port on this host");
  CHECK(rig.targets->own_port_problem(*other_port).empty());
  CHECK(rig.targets->own_port_problem(*other_host).empty());
}

TEST_CASE("connection router: the kernel's original destination of a connection nothing redirected") {
  // Without iptables (and with no local legs): netfilter either knows the
  // connection and gives the address it was made to, or does not track it
  // and says why. Either way the answer is whole: an address with its
  // length, or an error number.
  Rig rig;
  const ListenerSocket& s = rig.socket("outbound");
  uint16_t port = local_port(s.fds->fd_for(0));
  UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage to = ipv4("127.0.0.1", port);
  REQUIRE(::connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof(sockaddr_in)) == 0);
  UniqueFd accepted(::accept4(s.fds->fd_for(0), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(accepted.valid());
  sockaddr_storage out{};
  socklen_t len = 1;  // reset by the lookup, whatever the caller left in it
  int error = 0;
  if (ConnectionRouter::from_kernel(nullptr)(accepted.get(), s.config, &out, &len, &error)) {
    CHECK(len >= sizeof(sockaddr_in));  // netfilter leaves the length it was given
    CHECK(sockaddr_to_string(reinterpret_cast<sockaddr*>(&out), len) == "127.0.0.1:" + std::to_string(port));
  } else {
    CHECK(error != 0);
  }
}
