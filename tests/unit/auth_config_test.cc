// SPDX-License-Identifier: Apache-2.0
// tunnel.auth: the parser's rules, key files as load_config_file reads them
// (real files with real modes), and what a reload may change.
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_diff.h"
#include "config/key_files.h"
#include "test_support.h"

using namespace rdmagw;
using Catch::Matchers::Contains;
using rdmagw::test::error_lines;

namespace {

// The one error `text` is refused with.
ConfigError only_error(const std::string& text) {
  ConfigResult r = parse_config_text(text, "auth.yaml");
  INFO(text << "\n" << error_lines(r));
  REQUIRE(r.errors.size() == 1);
  CHECK(r.config == nullptr);
  return r.errors[0];
}

// A directory of key files, removed afterwards.
struct KeyDir : rdmagw::test::TempDir {
  KeyDir() : TempDir("rdmagw-keys") {}
  std::string write(const std::string& name, const std::string& content, mode_t mode = 0400) {
    std::string file = path + "/" + name;
    std::remove(file.c_str());
    {
      std::ofstream out(file);
      out << content;
    }
    REQUIRE(chmod(file.c_str(), mode) == 0);
    return file;
  }
  std::string config(const std::vector<std::string>& files) {
    std::string list;
    for (const auto& f : files) list += (list.empty() ? "" : ", ") + f;
    std::string file = path + "/rdmagw.yaml";
    std::ofstream out(file);
    out << "node: a\ntunnel:\n  address: 10.1.2.3\n  auth:\n    mode: psk\n    key_files: [" << list << "]\n";
    return file;
  }
};

const std::string kKey = "0123456789abcdef0123456789abcdef";  // 32 bytes

// Catch2 2.x has no SKIP: say so and pass.
#define SKIP_OR_RETURN                               \
  do {                                               \
    WARN("needs root (it changes owners and uids)"); \
    return;                                          \
  } while (0)

}  // namespace

TEST_CASE("tunnel.auth: a tunnel other hosts can reach needs it; loopback does not", "[config][auth]") {
  ConfigError e = only_error("node: a\ntunnel: {address: 10.1.2.3}\n");
  CHECK(e.key_path == "tunnel.auth");
  CHECK(e.line == 2);
  CHECK_THAT(e.message, Contains("10.1.2.3 is reachable from other hosts"));
  CHECK_THAT(e.message, Contains("mode: none"));
  e = only_error("node: a\ntunnel: {address: 0.0.0.0}\n");
  CHECK(e.key_path == "tunnel.auth");
  e = only_error("node: a\ntunnel: {address: '::'}\n");
  CHECK(e.key_path == "tunnel.auth");

  for (const char* loopback : {"127.0.0.1", "127.9.9.9", "'::1'"}) {
    ConfigResult r = parse_config_text(std::string("node: a\ntunnel: {address: ") + loopback + "}\n", "x.yaml");
    INFO(loopback << ": " << error_lines(r));
    CHECK(r.errors.empty());
    CHECK_FALSE(r.config->tunnel.auth.configured);
  }
  ConfigResult none = parse_config_text("node: a\ntunnel: {address: 10.1.2.3, auth: {mode: none}}\n", "x.yaml");
  INFO(error_lines(none));
  REQUIRE(none.config);
  CHECK(none.config->tunnel.auth.configured);
  CHECK(none.config->tunnel.auth.mode == AuthMode::kNone);
}

TEST_CASE("tunnel.auth: wrong shapes are refused with the key and the reason", "[config][auth][errors]") {
  const std::string head = "node: a\ntunnel:\n  auth:\n";
  struct Case {
    std::string auth;      // the lines under tunnel.auth
    std::string key_path;  // where the one error is reported
    std::string fragment;  // in its message
  };
  const Case cases[] = {
      {"    key_files: [/k]\n", "tunnel.auth", "needs mode"},
      {"    mode: tls\n", "tunnel.auth.mode", "psk, cert, none"},
      {"    mode: psk\n", "tunnel.auth", "needs key_files"},
      {"    mode: psk\n    key_files: []\n", "tunnel.auth.key_files", "at least one key file"},
      {"    mode: psk\n    key_files: [keys/current]\n", "tunnel.auth.key_files[0]", "absolute path"},
      {"    mode: psk\n    key_files: [/1, /2, /3, /4, /5, /6, /7, /8, /9]\n", "tunnel.auth.key_files", "at most 8"},
      {"    mode: none\n    key_files: [/k]\n", "tunnel.auth.key_files", "mode none takes no key"},
      {"    mode: psk\n    key_files: [/k]\n    encrypt: maybe\n", "tunnel.auth.encrypt", "true, false"},
      {"    mode: none\n    encrypt: true\n", "tunnel.auth.encrypt", "needs mode psk"},
      {"    mode: psk\n    key_files: [/k]\n    cipher: aes\n", "tunnel.auth.cipher", "unknown key"},
      {"    mode: cert\n    ca_files: [/ca]\n    cert_file: /c\n", "tunnel.auth", "mode cert needs ca_files"},
      {"    mode: cert\n    ca_files: []\n    cert_file: /c\n    key_file: /k\n", "tunnel.auth.ca_files",
       "at least one CA certificate file"},
      {"    mode: cert\n    ca_files: [ca.pem]\n    cert_file: /c\n    key_file: /k\n", "tunnel.auth.ca_files[0]",
       "absolute path"},
      {"    mode: psk\n    key_files: [/k]\n    cert_file: /c\n", "tunnel.auth.cert_file",
       "cert_file is for mode cert; mode psk does not use it"},
      {"    mode: cert\n    ca_files: [/ca]\n    cert_file: /c\n    key_file: /k\n    key_files: [/k]\n",
       "tunnel.auth.key_files", "key_files is for mode psk"},
  };
  for (const Case& c : cases) {
    ConfigError e = only_error(head + c.auth);
    CHECK(e.key_path == c.key_path);
    CHECK_THAT(e.message, Contains(c.fragment));
  }
}

TEST_CASE("key files: read, trimmed, and refused when not private or too short", "[config][auth]") {
  KeyDir dir;
  std::string key, error;
  SECTION("a private file: its content without surrounding whitespace") {
    std::string file = dir.write("k", "\n  " + kKey + "\t\n");
    REQUIRE(read_key_file(file, &key, &error));
    CHECK(key == kKey);
  }
  SECTION("readable by group or others: refused, with the mode and the fix") {
    for (mode_t mode : {0440, 0404, 0600 | 0002, 0644}) {
      std::string file = dir.write("k", kKey, mode);
      INFO("mode " << mode);
      CHECK_FALSE(read_key_file(file, &key, &error));
      CHECK_THAT(error, Contains("accessible by group or others"));
      CHECK_THAT(error, Contains("chmod 0400"));
    }
  }
  SECTION("shorter than 32 bytes after trimming") {
    std::string file = dir.write("k", "  " + kKey.substr(0, 31) + "  \n");
    CHECK_FALSE(read_key_file(file, &key, &error));
    CHECK_THAT(error, Contains("31 bytes"));
    CHECK_THAT(error, Contains("at least 32"));
  }
  SECTION("larger than a key file can be") {
    std::string file = dir.write("k", std::string(kMaxKeyFileBytes + 1, 'x'));
    CHECK_FALSE(read_key_file(file, &key, &error));
    CHECK_THAT(error, Contains("at most"));
  }
  SECTION("missing, or a directory") {
    CHECK_FALSE(read_key_file(dir.path + "/nothing", &key, &error));
    CHECK_THAT(error, Contains("No such file"));
    CHECK_FALSE(read_key_file(dir.path, &key, &error));
    CHECK_THAT(error, Contains("not a regular file"));
  }
  SECTION("a symlink to a private file is followed (Kubernetes Secret volumes)") {
    std::string target = dir.write("real", kKey);
    REQUIRE(symlink(target.c_str(), (dir.path + "/link").c_str()) == 0);
    REQUIRE(read_key_file(dir.path + "/link", &key, &error));
    CHECK(key == kKey);
  }
}

// Whether read_key_file accepts `file` in a child process that runs as
// group `gid`, and as uid `uid` unless nullopt (root then); needs root.
bool accepted_with(const std::string& file, std::optional<uid_t> uid, gid_t gid) {
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || (uid && setuid(*uid) != 0)) _exit(2);
    std::string key, error;
    _exit(read_key_file(file, &key, &error) ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) != 2);
  return WEXITSTATUS(status) == 0;
}
bool accepted_as(const std::string& file, uid_t id) { return accepted_with(file, id, id); }
bool accepted_as_root_with_group(const std::string& file, gid_t gid) { return accepted_with(file, std::nullopt, gid); }

TEST_CASE("key files: a non-root rdmagw takes a root-owned key its own group may read (Kubernetes fsGroup)",
          "[config][auth]") {
  if (geteuid() != 0) SKIP_OR_RETURN;
  KeyDir dir;
  REQUIRE(chmod(dir.path.c_str(), 0711) == 0);
  const uid_t sidecar = 64321;
  std::string file = dir.write("k", kKey, 0440);
  REQUIRE(chown(file.c_str(), 0, sidecar) == 0);
  CHECK(accepted_as(file, sidecar));
  // Not for root with group root, not for another group, never readable by others or writable by the group.
  std::string key, error;
  CHECK_FALSE(read_key_file(file, &key, &error));
  REQUIRE(chown(file.c_str(), 0, sidecar + 1) == 0);
  CHECK_FALSE(accepted_as(file, sidecar));
  for (mode_t mode : {0444, 0460}) {
    REQUIRE(chown(file.c_str(), 0, sidecar) == 0);
    REQUIRE(chmod(file.c_str(), mode) == 0);
    INFO("mode " << mode);
    CHECK_FALSE(accepted_as(file, sidecar));
  }
  // Owned by the sidecar itself: owner only, as always.
  REQUIRE(chown(file.c_str(), sidecar, sidecar) == 0);
  REQUIRE(chmod(file.c_str(), 0440) == 0);
  CHECK_FALSE(accepted_as(file, sidecar));
  REQUIRE(chmod(file.c_str(), 0400) == 0);
  CHECK(accepted_as(file, sidecar));
}

TEST_CASE("key files: a root rdmagw running with the pod's group takes the key that group may read (local legs)",
          "[config][auth]") {
  if (geteuid() != 0) SKIP_OR_RETURN;
  KeyDir dir;
  const gid_t pod_group = 64322;
  std::string file = dir.write("k", kKey, 0440);
  REQUIRE(chown(file.c_str(), 0, pod_group) == 0);
  CHECK(accepted_as_root_with_group(file, pod_group));
  // Not as group root, not with another group, not readable by others.
  CHECK_FALSE(accepted_as_root_with_group(file, 0));
  CHECK_FALSE(accepted_as_root_with_group(file, pod_group + 1));
  REQUIRE(chmod(file.c_str(), 0444) == 0);
  CHECK_FALSE(accepted_as_root_with_group(file, pod_group));
  // A root:root file readable by group root: still refused.
  REQUIRE(chown(file.c_str(), 0, 0) == 0);
  REQUIRE(chmod(file.c_str(), 0440) == 0);
  CHECK_FALSE(accepted_as_root_with_group(file, 0));
}

TEST_CASE("load_config_file reads every key file, and names the one it refuses", "[config][auth]") {
  KeyDir dir;
  std::string current = dir.write("current", kKey + "\n");
  std::string next = dir.write("next", std::string(44, 'n'));
  ConfigResult r = load_config_file(dir.config({current, next}));
  INFO(error_lines(r));
  REQUIRE(r.config);
  REQUIRE(r.config->tunnel.auth.keys);
  REQUIRE(r.config->tunnel.auth.keys->size() == 2);
  auto first = r.config->tunnel.auth.keys->key(0);
  CHECK(std::string(first.begin(), first.end()) == kKey);

  dir.write("next", std::string(44, 'n'), 0644);
  r = load_config_file(dir.config({current, next}));
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].key_path == "tunnel.auth.key_files[1]");
  CHECK(r.errors[0].line == 6);
  CHECK_THAT(r.errors[0].message, Contains(next + ": the key file is accessible by group or others (mode 0644)"));
}

TEST_CASE("reload: keys may change, the auth mode may not", "[config][auth]") {
  KeyDir dir;
  std::string file = dir.write("current", kKey);
  ConfigResult before = load_config_file(dir.config({file}));
  REQUIRE(before.config);
  ConfigResult same = load_config_file(dir.config({file}));
  REQUIRE(same.config);
  CHECK(describe_changes(*before.config, *same.config).empty());

  dir.write("current", std::string(40, 'z'));  // rotated in place
  ConfigResult rotated = load_config_file(dir.config({file}));
  REQUIRE(rotated.config);
  CHECK(restart_only_changes(*before.config, *rotated.config).empty());
  auto changes = describe_changes(*before.config, *rotated.config);
  REQUIRE(changes.size() == 1);
  CHECK_THAT(changes[0], Contains("tunnel.auth: keys changed"));

  ConfigResult none = parse_config_text("node: a\ntunnel: {address: 10.1.2.3, auth: {mode: none}}\n", "x.yaml");
  REQUIRE(none.config);
  auto restart = restart_only_changes(*before.config, *none.config);
  REQUIRE(restart.size() == 1);
  CHECK(restart[0] == "tunnel.auth.mode: psk -> none");
}

TEST_CASE("tunnel.auth.encrypt: on with psk, off by default, fixed at start", "[config][auth]") {
  auto on = parse_config_text(
      "node: a\ntunnel:\n  auth:\n    mode: psk\n    key_files: [/k]\n"
      "    encrypt: true\n",
      "auth.yaml");
  INFO(error_lines(on));
  REQUIRE(on.config);
  CHECK(on.config->tunnel.auth.encrypt);
  auto off = parse_config_text("node: a\ntunnel:\n  auth:\n    mode: psk\n    key_files: [/k]\n", "auth.yaml");
  REQUIRE(off.config);
  CHECK_FALSE(off.config->tunnel.auth.encrypt);
  std::vector<std::string> changes = restart_only_changes(*off.config, *on.config);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0] == "tunnel.auth.encrypt: false -> true");
}

// tunnel.auth.mode cert, from real files (tests/unit/certs, made by make.py).
namespace {
std::string cert_text(const std::string& name) { return rdmagw::test::read_source_file("tests/unit/certs/" + name); }
}  // namespace

TEST_CASE("tunnel.auth.mode cert: the certificate names the node and its address, its key is private",
          "[config][auth]") {
  KeyDir dir;
  std::string ca = dir.write("ca.pem", cert_text("ca-a.pem"), 0644);
  std::string crt = dir.write("dialer.crt", cert_text("dialer.crt.pem"), 0644);
  std::string key = dir.write("dialer.key", cert_text("dialer.key.pem"), 0400);
  auto config = [&](const std::string& node, const std::string& address, const std::string& key_file) {
    std::string file = dir.path + "/rdmagw.yaml";
    std::ofstream out(file);
    out << "node: " << node << "\ntunnel:\n  address: " << address << "\n  auth:\n    mode: cert\n    ca_files: [" << ca
        << "]\n    cert_file: " << crt << "\n    key_file: " << key_file << "\n";
    return file;
  };
  ConfigResult ok = load_config_file(config("dialer", "192.0.2.1", key));
  INFO((ok.errors.empty() ? std::string() : ok.errors[0].to_string()));
  REQUIRE(ok.config);
  REQUIRE(ok.config->tunnel.auth.credentials);
  CHECK(ok.config->tunnel.auth.credentials->name() == "dialer");
  CHECK(ok.config->tunnel.auth.mode == AuthMode::kCert);

  ConfigResult r = load_config_file(config("host-a", "192.0.2.1", key));
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].key_path == "node");
  CHECK_THAT(r.errors[0].message, Contains("is not the name in tunnel.auth.cert_file's certificate (CN 'dialer')"));

  r = load_config_file(config("dialer", "192.0.2.9", key));
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].key_path == "tunnel.address");
  CHECK_THAT(r.errors[0].message, Contains("is not among the IP addresses of tunnel.auth.cert_file's certificate "
                                           "(192.0.2.1)"));

  std::string open_key = dir.write("open.key", cert_text("dialer.key.pem"), 0644);
  r = load_config_file(config("dialer", "192.0.2.1", open_key));
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].key_path == "tunnel.auth.key_file");
  CHECK_THAT(r.errors[0].message, Contains("accessible by group or others"));

  std::string other_key = dir.write("acceptor.key", cert_text("acceptor.key.pem"), 0400);
  r = load_config_file(config("dialer", "192.0.2.1", other_key));
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].key_path == "tunnel.auth.key_file");
  CHECK_THAT(r.errors[0].message, Contains("the key is not cert_file's"));

  // A reload that brings another certificate says so.
  std::string crt2 = dir.write("dialer.crt", cert_text("dialer-expired.crt.pem"), 0644);
  (void)crt2;
  dir.write("dialer.key", cert_text("dialer-expired.key.pem"), 0400);
  ConfigResult next = load_config_file(config("dialer", "192.0.2.1", key));
  REQUIRE(next.config);
  auto changes = describe_changes(*ok.config, *next.config);
  CHECK(std::find(changes.begin(), changes.end(), "tunnel.auth: certificate, key or CAs changed (1 CA files)") !=
        changes.end());
  CHECK(restart_only_changes(*ok.config, *next.config).empty());
}
