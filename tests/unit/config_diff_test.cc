// SPDX-License-Identifier: Apache-2.0
#include "config/config_diff.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "config/config.h"

using rdmagw::Config;
using rdmagw::describe_changes;
using rdmagw::parse_config_text;
using rdmagw::restart_only_changes;

namespace {

// A valid config: host-a with peer `b`, listener `redis`, one target; `extra`
// is appended (more top-level keys) and `replace` edits are applied first.
std::shared_ptr<const Config> config(const std::vector<std::pair<std::string, std::string>>& replace = {}) {
  std::string text =
      "node: host-a\n"
      "workers: 2\n"
      "tunnel: {address: 127.0.0.1, tcp_port: 7471, transport: tcp}\n"
      "peers:\n"
      "  - {name: b, address: 127.0.0.2, tcp_port: 7481}\n"
      "listeners:\n"
      "  - {name: redis, listen: 'tcp:127.0.0.1:6380', peer: b, target: 'tcp:127.0.0.1:6379'}\n"
      "targets: ['tcp:127.0.0.1:8080']\n"
      "log_level: info\n";
  for (const auto& [from, to] : replace) {
    auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
  }
  auto result = parse_config_text(text, "test.yaml");
  INFO(text);
  REQUIRE(result.errors.empty());
  return result.config;
}

}  // namespace

TEST_CASE("an identical config changes nothing and needs no restart", "[config_diff]") {
  auto a = config(), b = config();
  CHECK(restart_only_changes(*a, *b).empty());
  CHECK(describe_changes(*a, *b).empty());
}

TEST_CASE("tunnel, workers, node and admin changes are named as restart-only", "[config_diff]") {
  auto running = config();
  auto next = config({{"tcp_port: 7471", "tcp_port: 7999"},
                      {"workers: 2", "workers: 3"},
                      {"node: host-a", "node: host-z"},
                      {"log_level: info", "log_level: info\nadmin: 127.0.0.1:9999"}});
  auto changes = restart_only_changes(*running, *next);
  CHECK(changes == std::vector<std::string>{"node: 'host-a' -> 'host-z'", "admin: '127.0.0.1:9901' -> '127.0.0.1:9999'",
                                            "workers: 2 -> 3", "tunnel.tcp_port: 7471 -> 7999"});
}

TEST_CASE("listeners, peers, targets and log level are described, not restart-only", "[config_diff]") {
  auto running = config();
  auto next = config({{"peers:\n", "peers:\n  - {name: c, address: 127.0.0.3, tcp_port: 7491}\n"},
                      {"target: 'tcp:127.0.0.1:6379'", "target: 'tcp:127.0.0.1:6390'"},
                      {"targets: ['tcp:127.0.0.1:8080']", "targets: ['tcp:127.0.0.1:8081', 'tcp:127.0.0.1:8082']"},
                      {"log_level: info", "log_level: debug"}});
  CHECK(restart_only_changes(*running, *next).empty());
  CHECK(describe_changes(*running, *next) == std::vector<std::string>{"listener redis changed", "peer c added",
                                                                      "targets: 2 added, 1 removed",
                                                                      "log_level: 'info' -> 'debug'"});
}

TEST_CASE("a peer whose address changed is reported changed; a renamed listener is removed and added",
          "[config_diff]") {
  auto running = config();
  auto next = config({{"address: 127.0.0.2", "address: 127.0.0.9"}, {"name: redis", "name: cache"}});
  CHECK(describe_changes(*running, *next) ==
        std::vector<std::string>{"listener cache added", "listener redis removed", "peer b changed"});
}
