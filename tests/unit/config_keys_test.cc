// SPDX-License-Identifier: Apache-2.0
// Every key of config/config_keys.h, the parser's list: changing it in a
// file makes a reload either apply it and say so, or refuse it as
// restart-only (config_diff.cc), and docs/configuration.md has a row for it
// in its section. A key added to the parser fails here until both are done.
#include "config/config_keys.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_diff.h"
#include "config/number_keys.h"
#include "test_support.h"

using namespace rdmagw;
using rdmagw::test::parse_config_ok;
using rdmagw::test::read_source_file;

namespace {

// Sets every section (a psk tunnel, two peers, a plain, a Unix and a
// transparent listener, both forms of targets and of peer_cidrs).
constexpr const char* kBase = R"(node: host-a
admin: 127.0.0.1:9901
workers: 2
shutdown_timeout_ms: 10000
log_level: info
tunnel:
  address: 127.0.0.1
  tcp_port: 7471
  rdma_port: 7472
  transport: tcp
  connect_timeout_ms: 3000
  auth: {mode: psk, key_files: [/etc/rdmagw/a]}
  rdma: {}
  limits: {}
  peer_cidrs:
    - 10.0.0.0/16
    - {cidr: 10.9.0.0/24, tcp_port: 17471, rdma_port: 17472}
peers:
  - {name: host-b, address: 127.0.0.1, tcp_port: 7481}
  - {name: host-c, address: 127.0.0.1, tcp_port: 7491}
listeners:
  - {name: plain, listen: "tcp:127.0.0.1:6380", peer: host-b, target: "tcp:127.0.0.1:6379"}
  - {name: local, listen: "unix:/run/rdmagw-test.sock", peer: host-b, target: "tcp:127.0.0.1:6379", socket_mode: "0660"}
  - name: out
    listen: "transparent:127.0.0.1:15001"
    routes:
      - {match: 10.0.0.0/16, peer: host-b, target: "tcp:127.0.0.1:6379", action: tunnel}
targets:
  - "tcp:127.0.0.1:6379"
  - {target: "tcp:127.0.0.1:6390", peers: [10.0.0.0/8]}
services: {file: /run/rdmagw/services.json}
)";

// A change to one key: `before` is set in both files (when the key needs
// another setting around it), `value` and `also` only in the second. Paths
// name list items by index ("peers[1].name"); the key's path drops them.
struct Change {
  std::string at;
  std::string value;
  std::map<std::string, std::string> before = {};
  std::map<std::string, std::string> also = {};
};

// The certificate keys need mode cert around them.
std::map<std::string, std::string> kCertMode() {
  return {{"tunnel.auth",
           "{mode: cert, ca_files: [/etc/rdmagw/ca.pem], cert_file: /etc/rdmagw/node.pem, "
           "key_file: /etc/rdmagw/node.key}"}};
}

// A change to each numeric key of config/number_keys.h: one more than its
// default (one less at the top of its range), which no relation between
// keys refuses. A key added to that table is changed here by itself.
std::vector<Change> number_key_changes() {
  Config defaults;
  std::vector<Change> out;
  for (const config_keys::NumberKey& k : config_keys::kNumberKeys) {
    uint64_t value = k.get(defaults);
    value = value < k.max ? value + 1 : value - 1;
    out.push_back({config_keys::number_key_path(k), std::to_string(value)});
  }
  return out;
}

const std::vector<Change>& changes() {
  static const std::vector<Change> kChanges = [] {
    std::vector<Change> listed = {
        {"node", "host-z"},
        {"admin", "127.0.0.1:19901"},
        {"admin_token_file", "/etc/rdmagw/token"},
        {"workers", "3"},
        {"worker_cpus", "[0]"},
        {"shutdown_timeout_ms", "5000"},
        {"log_level", "debug"},
        {"access_log.enabled", "false"},
        {"access_log.path", "/var/log/rdmagw/access.log"},
        {"access_log.format", "json", {{"access_log.path", "/var/log/rdmagw/access.log"}}},
        {"services.file", "/run/rdmagw-k8s/services.json"},
        {"services.direct", "never"},
        {"local_legs.redirect", "true", {}, {{"local_legs.cgroup", "/sys/fs/cgroup/rdmagw"}}},
        {"local_legs.cgroup", "/sys/fs/cgroup/other"},
        {"local_legs.cgroup_fs", "/host/cgroup", {{"local_legs.cgroup", "pod"}}},
        {"tunnel.address", "127.0.0.2"},
        {"tunnel.tcp_port", "7571"},
        {"tunnel.rdma_port", "7572"},
        {"tunnel.transport", "auto"},
        {"tunnel.tcp_splice", "true", {{"tunnel.auth", "{mode: none}"}}},
        {"tunnel.rdma.device", "erdma_0"},
        {"tunnel.rdma.max_pinned", "32MiB"},
        {"tunnel.auth.mode", "psk", {{"tunnel.auth", "{mode: none}"}}, {{"tunnel.auth.key_files", "[/etc/rdmagw/a]"}}},
        {"tunnel.auth.key_files", "[/etc/rdmagw/b]"},
        {"tunnel.auth.encrypt", "true"},
        {"tunnel.auth.ca_files", "[/etc/rdmagw/ca2.pem]", kCertMode()},
        {"tunnel.auth.cert_file", "/etc/rdmagw/node2.pem", kCertMode()},
        {"tunnel.auth.key_file", "/etc/rdmagw/node2.key", kCertMode()},
        {"tunnel.peer_cidrs[1].cidr", "10.8.0.0/24"},
        {"tunnel.peer_cidrs[1].tcp_port", "17481"},
        {"tunnel.peer_cidrs[1].rdma_port", "17482"},
        {"peers[1].name", "host-d"},
        {"peers[1].address", "127.0.0.3"},
        {"peers[1].tcp_port", "7499"},
        {"peers[1].rdma_port", "7498"},
        {"peers[1].connect", "always"},
        {"listeners[0].name", "renamed"},
        {"listeners[0].listen", "\"tcp:127.0.0.1:6381\""},
        {"listeners[0].peer", "host-c"},
        {"listeners[0].target", "\"tcp:127.0.0.1:6390\""},
        {"listeners[1].socket_mode", "\"0666\""},
        {"listeners[0].clients", "[127.0.0.0/8]"},
        {"listeners[2].routes[0].match", "10.1.0.0/16"},
        {"listeners[2].routes[0].peer", "host-c"},
        {"listeners[2].routes[0].target", "\"tcp:127.0.0.1:6390\""},
        {"listeners[2].routes[0].action",
         "passthrough",
         {},
         {{"listeners[2].routes[0].peer", "~"}, {"listeners[2].routes[0].target", "~"}}},
        {"listeners[0].max_connections", "100"},
        {"listeners[0].accepts_per_second", "50"},
        {"listeners[0].idle_timeout_ms", "60000"},
        {"targets[1].target", "\"tcp:127.0.0.1:6391\""},
        {"targets[1].peers", "[10.0.0.0/16]"},
        {"targets[1].proxy_protocol", "v2"},
    };
    for (Change& c : number_key_changes()) listed.push_back(std::move(c));
    return listed;
  }();
  return kChanges;
}

// "listeners[2].routes[0].match" -> "listeners[].routes[].match".
std::string key_path(const std::string& at) { return std::regex_replace(at, std::regex(R"(\[\d+\])"), "[]"); }

// The node at `at`, made if missing; "~" as a value removes the key.
void set(YAML::Node root, const std::string& at, const std::string& value) {
  std::vector<std::pair<std::string, int>> steps;  // key, index or -1
  std::stringstream in(at);
  std::string part;
  while (std::getline(in, part, '.')) {
    std::smatch m;
    if (std::regex_match(part, m, std::regex(R"((\w+)\[(\d+)\])")))
      steps.push_back({m[1], std::stoi(m[2])});
    else
      steps.push_back({part, -1});
  }
  YAML::Node node = root;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [key, index] = steps[i];
    bool last = i + 1 == steps.size();
    if (last && index < 0) {
      if (value == "~")
        node.remove(key);
      else
        node[key] = YAML::Load(value);
      return;
    }
    node.reset(node[key]);
    if (index >= 0) node.reset(node[index]);
  }
}

std::string with(const std::map<std::string, std::string>& edits) {
  YAML::Node root = YAML::Load(kBase);
  for (const auto& [at, value] : edits) set(root, at, value);
  YAML::Emitter out;
  out << root;
  return out.c_str();
}

// Keys that are mappings or lists of mappings of their own: their changes
// are their keys' changes.
bool is_section(const std::string& path) {
  for (const auto& s : config_keys::kSections)
    if (s.path == path || s.path == path + "[]") return true;
  return false;
}

// The heading of docs/configuration.md under which a section's keys have
// their table rows.
std::string docs_heading(std::string_view section) {
  if (section.empty() || section == "targets[]") return "## Top-level keys";
  if (section == "tunnel.peer_cidrs[]") return "### Fleet: peers found by destination";
  if (section == "listeners[].routes[]") return "#### Transparent listeners";
  return "### `" + std::string(section) + "`";
}

// The text from `heading` to the next heading of the same or a higher level.
std::string docs_section(const std::string& docs, const std::string& heading) {
  size_t at = docs.find("\n" + heading + "\n");
  REQUIRE(at != std::string::npos);
  size_t level = heading.find(' ');
  size_t end = at + 1 + heading.size();
  while ((end = docs.find("\n#", end)) != std::string::npos) {
    size_t hashes = docs.find_first_not_of('#', end + 1) - (end + 1);
    if (hashes <= level) break;
    ++end;
  }
  return docs.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace

TEST_CASE("config keys: every key the parser accepts has a change below") {
  std::set<std::string> covered;
  for (const Change& c : changes()) covered.insert(key_path(c.at));
  for (const std::string& path : config_keys::all_paths()) {
    INFO(path << ": add a change for it to config_keys_test.cc (and classify it in config_diff.cc)");
    CHECK((is_section(path) || covered.count(path) == 1));
  }
  std::vector<std::string> all = config_keys::all_paths();
  for (const std::string& path : covered) {
    INFO(path << " is not a key the parser accepts");
    CHECK(std::find(all.begin(), all.end(), path) != all.end());
  }
}

TEST_CASE("config keys: a change to any key is either reloaded and said, or refused as restart-only") {
  for (const Change& c : changes()) {
    INFO(c.at << ": " << c.value);
    std::map<std::string, std::string> edits = c.before;
    auto running = parse_config_ok(with(edits));
    edits[c.at] = c.value;
    for (const auto& [at, value] : c.also) edits[at] = value;
    auto next = parse_config_ok(with(edits));
    std::vector<std::string> restart = restart_only_changes(*running, *next);
    std::vector<std::string> reload = describe_changes(*running, *next);
    std::string said;
    for (const auto& s : restart) said += "restart: " + s + "\n";
    for (const auto& s : reload) said += "reload: " + s + "\n";
    INFO(said);
    CHECK(!said.empty());
  }
}

TEST_CASE("config keys: a numeric key's change is refused or applied as number_keys.h says") {
  for (const Change& c : number_key_changes()) {
    INFO(c.at << ": " << c.value);
    auto running = parse_config_ok(with({}));
    auto next = parse_config_ok(with({{c.at, c.value}}));
    std::vector<std::string> restart = restart_only_changes(*running, *next);
    std::vector<std::string> reload = describe_changes(*running, *next);
    bool restart_only = false;
    for (const config_keys::NumberKey& k : config_keys::kNumberKeys)
      if (config_keys::number_key_path(k) == c.at) restart_only = k.on_reload == config_keys::OnReload::kRestart;
    const std::vector<std::string>& said = restart_only ? restart : reload;
    const std::vector<std::string>& unsaid = restart_only ? reload : restart;
    REQUIRE(said.size() == 1);
    CHECK(said[0].starts_with(c.at + ": "));
    CHECK(unsaid.empty());
  }
}

// The verdicts themselves, written down apart from the table that gives
// them: a key moved between "applied" and "needs a restart" is a change
// operators see, and it has to be made here too.
TEST_CASE("config keys: the numeric keys a reload applies, and no others") {
  std::set<std::string> applied;
  for (const config_keys::NumberKey& k : config_keys::kNumberKeys)
    if (k.on_reload == config_keys::OnReload::kApply) applied.insert(config_keys::number_key_path(k));
  CHECK(applied == std::set<std::string>{"tunnel.session_idle_ms", "tunnel.max_sessions", "tunnel.sessions_per_peer",
                                         "tunnel.rdma_share", "access_log.lines_per_second", "metrics.peer_series"});
}

TEST_CASE("config keys: docs/configuration.md has a row for every key, in its section") {
  std::string docs = read_source_file("docs/configuration.md");
  for (const auto& section : config_keys::kSections) {
    std::string text = docs_section(docs, docs_heading(section.path));
    for (std::string_view key : *section.keys) {
      INFO((section.path.empty() ? "" : std::string(section.path) + ".")
           << key << " under " << docs_heading(section.path));
      // A table row, or for list items given in a flow mapping, the key
      // shown in one (`{cidr: ..., tcp_port: ...}`).
      bool row = text.find("| `" + std::string(key) + "` |") != std::string::npos;
      bool flow = section.path.ends_with("[]") && text.find(std::string(key) + ": ") != std::string::npos;
      CHECK((row || flow));
    }
  }
}

TEST_CASE("access_log: json needs a path, a path is absolute, and a rate is at least 1") {
  auto errors = [](const std::string& access_log) {
    ConfigResult r = parse_config_text("node: a\naccess_log: " + access_log + "\n", "a.yaml");
    std::string out;
    for (const auto& e : r.errors) out += e.to_string() + "\n";
    return out;
  };
  CHECK(errors("{format: json}").find("access_log.format: json needs access_log.path") != std::string::npos);
  CHECK(errors("{path: logs/access.log}").find("access_log.path: must be an absolute path") != std::string::npos);
  CHECK(errors("{lines_per_second: 0}").find("access_log.lines_per_second") != std::string::npos);
  CHECK(errors("{path: /var/log/a.log, format: json, lines_per_second: 5, enabled: false}").empty());
  ConfigResult ok = parse_config_text("node: a\n", "a.yaml");
  REQUIRE(ok.config);
  CHECK(ok.config->access_log.enabled);  // on by default, into the process log
  CHECK(ok.config->access_log.path.empty());
}

TEST_CASE("local_legs: off by default; redirect needs an absolute cgroup or pod; max_in_flight is bounded") {
  auto errors = [](const std::string& legs) {
    ConfigResult r = parse_config_text("node: a\nlocal_legs: " + legs + "\n", "a.yaml");
    std::string out;
    for (const auto& e : r.errors) out += e.to_string() + "\n";
    return out;
  };
  CHECK(errors("{redirect: true}").find("local_legs.cgroup: is required with redirect: true") != std::string::npos);
  CHECK(errors("{redirect: true, cgroup: pods}").find("local_legs.cgroup: must be an absolute path") !=
        std::string::npos);
  CHECK(errors("{redirect: true, cgroup: pod}").empty());
  CHECK(errors("{redirect: true, cgroup: pod, cgroup_fs: /host/cgroup}").empty());
  CHECK(errors("{redirect: true, cgroup: pod, cgroup_fs: host/cgroup}")
            .find("local_legs.cgroup_fs: must be an absolute path") != std::string::npos);
  CHECK(errors("{redirect: true, cgroup: /sys/fs/cgroup/pod, cgroup_fs: /host/cgroup}")
            .find("local_legs.cgroup_fs: is used only with cgroup: pod") != std::string::npos);
  CHECK(errors("{max_in_flight: 1KiB}").find("local_legs.max_in_flight") != std::string::npos);
  CHECK(errors("{max_in_flight: 1GiB}").find("local_legs.max_in_flight") != std::string::npos);
  CHECK(errors("{redirect: maybe, cgroup: /sys/fs/cgroup/pod}").find("local_legs.redirect") != std::string::npos);
  CHECK(errors("{redirect: true, cgroup: /sys/fs/cgroup/pod, max_in_flight: 1MiB}").empty());
  ConfigResult ok = parse_config_text("node: a\nlocal_legs: {redirect: true, cgroup: /sys/fs/cgroup/pod}\n", "a.yaml");
  REQUIRE(ok.config);
  CHECK(ok.config->local_legs.redirect);
  CHECK(ok.config->local_legs.max_in_flight == 256 * 1024);
  ConfigResult off = parse_config_text("node: a\n", "a.yaml");
  REQUIRE(off.config);
  CHECK_FALSE(off.config->local_legs.redirect);
}
