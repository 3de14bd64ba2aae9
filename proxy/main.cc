// SPDX-License-Identifier: Apache-2.0
// rdmagw: per-host sidecar that carries TCP and Unix-socket streams to a
// peer sidecar over a multiplexed tunnel (RDMA, or TCP where RDMA is absent).
#include <sys/resource.h>

#include <cstdio>
#include <string>

#include "common/log.h"
#include "config/config.h"
#include "proxy/runtime/runtime.h"

namespace rdmagw {
namespace {

constexpr const char* kUsage = R"(Usage: rdmagw --config FILE [--check] [--takeover] [--log-level LEVEL]
       rdmagw --help | --version

rdmagw is a per-host sidecar: local applications connect to its listeners
(TCP or Unix socket) and it carries each connection, multiplexed, to a peer
rdmagw, which connects to the real target. See README.md and docs/.

Options:
  -c, --config FILE      YAML configuration (see docs/configuration.md)
      --check            validate the configuration and exit: 0 if valid,
                         2 with one "FILE:LINE:COL: key: message" line per error
      --takeover         take over from the rdmagw running this configuration
                         on this host (found by its tunnel address): its
                         listening sockets, open connections and sessions
                         move here without a reset, then it exits 0. With
                         none running, start as usual. See docs/operations.md
      --log-level LEVEL  debug | info | warn | error (overrides log_level)
  -h, --help             show this help
  -V, --version          show the version

Signals:
  SIGTERM, SIGINT        stop accepting, let open streams finish for up to
                         shutdown_timeout_ms, then exit 0; a second signal
                         stops at once
  SIGHUP                 reload the configuration file: listeners, peers,
                         routes and targets change, open streams continue;
                         an invalid file keeps the running configuration

Admin endpoint (admin:, default 127.0.0.1:9901): /ready /live /stats
/metrics /peers /streams /config, POST /reload /drain. See docs/admin.md;
rdmagwctl is its command-line client.

Exit status: 0 success, 1 runtime failure (e.g. a port in use), 2 bad
usage or invalid configuration.
)";

struct Options {
  std::string config;
  bool check = false;
  bool takeover = false;
  std::string log_level;
};

int parse_args(int argc, char** argv, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        fprintf(stderr, "rdmagw: %s needs a value\n", name);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      return 0;
    } else if (a == "-V" || a == "--version") {
      printf("rdmagw %s\n", RDMAGW_VERSION);
      return 0;
    } else if (a == "-c" || a == "--config") {
      const char* v = value("--config");
      if (!v) return 2;
      opt->config = v;
    } else if (a.starts_with("--config=")) {
      opt->config = a.substr(9);
    } else if (a == "--check") {
      opt->check = true;
    } else if (a == "--takeover") {
      opt->takeover = true;
    } else if (a == "--log-level") {
      const char* v = value("--log-level");
      if (!v) return 2;
      opt->log_level = v;
    } else {
      fprintf(stderr, "rdmagw: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (opt->config.empty()) {
    fprintf(stderr, "rdmagw: --config FILE is required\n\n%s", kUsage);
    return 2;
  }
  return -1;  // continue
}

void raise_fd_limit() {
  // Each stream holds a socket; the default soft limit of 1024 is far too low.
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int run(const Options& opt) {
  ConfigResult loaded = load_config_file(opt.config);
  if (!loaded.errors.empty()) {
    for (const auto& e : loaded.errors) fprintf(stderr, "%s\n", e.to_string().c_str());
    fprintf(stderr, "rdmagw: %zu error%s in %s\n", loaded.errors.size(), loaded.errors.size() == 1 ? "" : "s",
            opt.config.c_str());
    return 2;
  }
  std::shared_ptr<const Config> config = loaded.config;
  if (opt.check) {
    printf("%s: ok (%zu listeners, %zu peers, %zu targets)\n", opt.config.c_str(), config->listeners.size(),
           config->peers.size(), config->targets.size());
    return 0;
  }
  log::Level level = log::Level::kInfo;
  std::string level_text = opt.log_level.empty() ? config->log_level : opt.log_level;
  if (!log::parse_level(level_text, &level)) {
    fprintf(stderr, "rdmagw: --log-level '%s' must be one of debug, info, warn, error\n", level_text.c_str());
    return 2;
  }
  log::set_level(level);
  log::set_node(config->node);
  raise_fd_limit();
  Runtime runtime(RuntimeOptions{opt.config, !opt.log_level.empty(), opt.takeover}, config);
  return runtime.run();
}

}  // namespace
}  // namespace rdmagw

int main(int argc, char** argv) {
  rdmagw::Options opt;
  int rc = rdmagw::parse_args(argc, argv, &opt);
  if (rc >= 0) return rc;
  try {
    return rdmagw::run(opt);
  } catch (const std::exception& e) {
    fprintf(stderr, "rdmagw: fatal: %s\n", e.what());
    return 1;
  }
}
