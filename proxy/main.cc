// rdmagw: per-host sidecar that carries TCP and Unix-socket streams to a
// peer sidecar over a multiplexed tunnel (RDMA, or TCP where RDMA is absent).
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "config/config.h"
#include "proxy/runtime/worker.h"
#include "proxy/transport/rdma/rdma_context.h"

namespace rdmagw {
namespace {

constexpr const char* kUsage = R"(Usage: rdmagw --config FILE [--check] [--log-level LEVEL]
       rdmagw --help | --version

rdmagw is a per-host sidecar: local applications connect to its listeners
(TCP or Unix socket) and it carries each connection, multiplexed, to a peer
rdmagw, which connects to the real target. See README.md and docs/.

Options:
  -c, --config FILE      YAML configuration (see docs/configuration.md)
      --check            validate the configuration and exit: 0 if valid,
                         2 with one "FILE:LINE:COL: key: message" line per error
      --log-level LEVEL  debug | info | warn | error (overrides log_level)
  -h, --help             show this help
  -V, --version          show the version

Signals:
  SIGTERM, SIGINT        stop accepting, let open streams finish for up to
                         shutdown_timeout_ms, then exit 0; a second signal
                         stops at once

Exit status: 0 success, 1 runtime failure (e.g. a port in use), 2 bad
usage or invalid configuration.
)";

struct Options {
  std::string config;
  bool check = false;
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

bool parse_level(const std::string& text, log::Level* level) {
  if (text == "debug") *level = log::Level::kDebug;
  else if (text == "info") *level = log::Level::kInfo;
  else if (text == "warn") *level = log::Level::kWarn;
  else if (text == "error") *level = log::Level::kError;
  else return false;
  return true;
}

// A unix socket path left behind by a dead process is removed; one that a
// live process still serves is an error, as for a TCP port in use.
bool clear_stale_unix_socket(const Endpoint& ep, std::string* error) {
  auto* un = reinterpret_cast<const sockaddr_un*>(&ep.addr);
  struct stat st;
  if (lstat(un->sun_path, &st) != 0) return true;
  if (!S_ISSOCK(st.st_mode)) {
    *error = std::string(un->sun_path) + " exists and is not a socket";
    return false;
  }
  int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool live = probe >= 0 && ::connect(probe, reinterpret_cast<const sockaddr*>(&ep.addr), ep.addr_len) == 0;
  if (probe >= 0) ::close(probe);
  if (live) {
    *error = std::string(un->sun_path) + " is in use by another process";
    return false;
  }
  ::unlink(un->sun_path);
  return true;
}

int open_listener(const Endpoint& ep, bool reuseport, std::string* error) {
  if (ep.kind == Endpoint::Kind::kUnix && !clear_stale_unix_socket(ep, error)) return -1;
  int fd = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + strerror(errno);
    return -1;
  }
  int one = 1;
  if (ep.kind == Endpoint::Kind::kTcp) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.addr_len) != 0) {
    *error = std::string("bind: ") + strerror(errno);
    ::close(fd);
    return -1;
  }
  if (::listen(fd, 4096) != 0) {
    *error = std::string("listen: ") + strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

bool open_all_listeners(const Config& config, ListenSockets* sockets) {
  unsigned workers = config.workers;
  sockets->worker_count = workers;
  for (size_t i = 0; i < config.listeners.size(); ++i) {
    const ListenerConfig& l = config.listeners[i];
    ListenSockets::Local local{&l, {}};
    // TCP: one socket per worker with SO_REUSEPORT, so the kernel spreads
    // connections. Unix sockets cannot do that: the workers share one.
    unsigned count = l.listen.kind == Endpoint::Kind::kTcp ? workers : 1;
    for (unsigned w = 0; w < count; ++w) {
      std::string error;
      int fd = open_listener(l.listen, true, &error);
      if (fd < 0) {
        log::error("listen_failed")
            .kv("key", "listeners[" + std::to_string(i) + "].listen")
            .kv("listener", l.name)
            .kv("address", l.listen.to_string())
            .kv("reason", error);
        return false;
      }
      local.fds.push_back(fd);
    }
    sockets->locals.push_back(std::move(local));
  }
  std::string error;
  auto tunnel_ep = make_tcp_endpoint(config.tunnel.address, config.tunnel.tcp_port, &error);
  if (!tunnel_ep) {
    log::error("listen_failed").kv("key", "tunnel.address").kv("reason", error);
    return false;
  }
  for (unsigned w = 0; w < workers; ++w) {
    int fd = open_listener(*tunnel_ep, true, &error);
    if (fd < 0) {
      log::error("listen_failed")
          .kv("key", "tunnel.tcp_port")
          .kv("address", tunnel_ep->to_string())
          .kv("reason", error);
      return false;
    }
    sockets->tunnel_fds.push_back(fd);
  }
  return true;
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
  if (!parse_level(level_text, &level)) {
    fprintf(stderr, "rdmagw: --log-level '%s' must be one of debug, info, warn, error\n", level_text.c_str());
    return 2;
  }
  log::set_level(level);
  log::set_node(config->node);
  raise_fd_limit();
  // RDMA is used when asked for (auto | rdma) and this host can: a device,
  // and enough lockable memory for every worker's registered slab.
  bool rdma = false;
  std::string rdma_reason = "configured";
  if (config->tunnel.transport != TransportMode::kTcp) {
    rdma_reason = transport::rdma_unavailable_reason(config->tunnel.rdma, config->workers);
    rdma = rdma_reason.empty();
    if (rdma) {
      // A device is here: a configuration it cannot honour is an error in
      // auto as in rdma, not a reason to fall back quietly.
      std::string error = transport::rdma_config_error(config->tunnel.rdma);
      if (!error.empty()) {
        log::error("rdma_config_exceeds_device").kv("reason", error);
        return 1;
      }
    }
    if (!rdma && config->tunnel.transport == TransportMode::kRdma) {
      log::error("transport_unavailable").kv("key", "tunnel.transport").kv("value", "rdma").kv("reason", rdma_reason);
      return 1;
    }
    if (rdma) rdma_reason = "RDMA device available";
  }

  // Signals go to this thread only (sigtimedwait below); workers never see them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ListenSockets sockets;
  sockets.rdma = rdma;
  if (!open_all_listeners(*config, &sockets)) return 1;

  std::atomic<int> stop_level{0};
  std::mutex mu;
  std::condition_variable cv;
  unsigned initialized = 0;
  bool init_failed = false;
  std::atomic<unsigned> finished{0};
  std::vector<std::thread> threads;
  std::string features;
  for (unsigned w = 0; w < config->workers; ++w) {
    threads.emplace_back([&, w] {
      {
        Worker worker(w, config, sockets, stop_level);
        std::string error;
        bool ok = worker.init(&error);
        {
          std::lock_guard lock(mu);
          ++initialized;
          if (!ok) {
            init_failed = true;
            log::error("worker_failed").kv("reason", error);
          }
          if (w == 0) features = worker.features().describe();
        }
        cv.notify_all();
        if (ok) {
          // Wait until every worker is ready, so a failure stops them all.
          {
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return initialized == config->workers; });
          }
          if (!init_failed) worker.run();
        }
      }
      finished.fetch_add(1);
    });
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return initialized == config->workers; });
  }
  int status = 0;
  if (init_failed) {
    status = 1;
  } else {
    std::string listeners;
    for (const auto& l : config->listeners) listeners += (listeners.empty() ? "" : ",") + l.listen.to_string();
    log::info("ready")
        .kv("version", RDMAGW_VERSION)
        .kv("workers", config->workers)
        .kv("listeners", listeners)
        .kv("tunnel", "tcp:" + config->tunnel.address + ":" + std::to_string(config->tunnel.tcp_port))
        .kv("transport", rdma ? (config->tunnel.transport == TransportMode::kRdma ? "rdma" : "rdma,tcp") : "tcp")
        .kv("transport_reason", rdma_reason)
        .kv("io_uring", features);
    timespec poll{0, 100 * 1000 * 1000};
    while (finished.load() < config->workers) {
      siginfo_t info;
      int sig = sigtimedwait(&stop_signals, &info, &poll);
      if (sig == SIGTERM || sig == SIGINT) {
        int previous = stop_level.load();
        int next = previous == 0 ? static_cast<int>(StopLevel::kDrain) : static_cast<int>(StopLevel::kNow);
        stop_level.store(next);
        log::info(next == 1 ? "shutdown_requested" : "shutdown_forced").kv("signal", strsignal(sig));
      }
    }
  }
  for (auto& t : threads) t.join();
  for (auto& l : sockets.locals)
    for (int fd : l.fds)
      if (fd >= 0 && status != 0) ::close(fd);
  if (status == 0) log::info("stopped");
  return status;
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
