// SPDX-License-Identifier: Apache-2.0
// rdmagw: per-host sidecar that carries TCP and Unix-socket streams to a
// peer sidecar over a multiplexed tunnel (RDMA, or TCP where RDMA is absent).
#include <getopt.h>
#include <sys/resource.h>

#include <cstdio>
#include <string>

#include "common/log.h"
#include "common/version.h"
#include "config/config.h"
#include "proxy/runtime/runtime.h"

namespace rdmagw {
namespace {

constexpr const char* kUsage = R"(Usage: rdmagw --config FILE [--check] [--takeover] [--log-level LEVEL]
       rdmagw --help | --version

rdmagw is a per-host sidecar: local applications connect to its listeners
(TCP or Unix socket) and it carries each connection, multiplexed, to a peer
rdmagw, which connects to the real target. See README.md and docs/.

Options (a value may follow as the next argument or after '='):
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
  -V, --version          show the version and the commit it was built from

Signals:
  SIGTERM, SIGINT        stop accepting, let open streams finish for up to
                         shutdown_timeout_ms, then exit 0; a second signal
                         stops at once
  SIGHUP                 reload the configuration file: listeners, peers,
                         routes and targets change, open streams continue;
                         an invalid file keeps the running configuration
  SIGUSR1                open access_log.path again (after logrotate moved it)

Admin endpoint (admin:, default 127.0.0.1:9901): /ready /live /stats
/metrics /peers /streams /services /config, POST /reload /drain /undrain. See
docs/admin.md; rdmagwctl is its command-line client.

Exit status: 0 success, 1 runtime failure (e.g. a port in use), 2 bad
usage or invalid configuration.
)";

struct Options {
  std::string config;
  bool check = false;
  bool takeover = false;
  std::string log_level;
};

// GNU long options, as rdmagwctl takes them: "--config FILE" and
// "--config=FILE" alike, "-c FILE". Every option is checked here, before
// the configuration is read, so that --check refuses what a start would.
int parse_args(int argc, char** argv, Options* opt) {
  enum : int { kCheck = 256, kTakeover, kLogLevel };
  static const option kOptions[] = {{"config", required_argument, nullptr, 'c'},
                                    {"check", no_argument, nullptr, kCheck},
                                    {"takeover", no_argument, nullptr, kTakeover},
                                    {"log-level", required_argument, nullptr, kLogLevel},
                                    {"help", no_argument, nullptr, 'h'},
                                    {"version", no_argument, nullptr, 'V'},
                                    {nullptr, 0, nullptr, 0}};
  opterr = 0;  // our messages, not getopt's
  optind = 1;
  auto usage_error = [](const std::string& message) {
    fprintf(stderr, "rdmagw: %s\n\n%s", message.c_str(), kUsage);
    return 2;
  };
  int c;
  while ((c = getopt_long(argc, argv, ":c:hV", kOptions, nullptr)) != -1) {
    switch (c) {
      case 'h':
        fputs(kUsage, stdout);
        return 0;
      case 'V':
        printf("%s\n", version_line("rdmagw").c_str());
        return 0;
      case 'c':
        opt->config = optarg;
        break;
      case kCheck:
        opt->check = true;
        break;
      case kTakeover:
        opt->takeover = true;
        break;
      case kLogLevel: {
        log::Level level;
        if (!log::parse_level(optarg, &level))
          return usage_error(std::string("--log-level '") + optarg + "' must be one of debug, info, warn, error");
        opt->log_level = optarg;
        break;
      }
      case ':':
        return usage_error(std::string(argv[optind - 1]) + " needs a value");
      default: {
        std::string given = argv[optind - 1];
        std::string name = given.substr(0, given.find('='));
        for (const option* o = kOptions; o->name; ++o)
          if (name == std::string("--") + o->name && o->has_arg == no_argument)
            return usage_error(name + " takes no value");
        return usage_error("unknown option '" + given + "'");
      }
    }
  }
  if (optind < argc) return usage_error(std::string("unexpected argument '") + argv[optind] + "'");
  if (opt->config.empty()) return usage_error("--config FILE is required");
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
