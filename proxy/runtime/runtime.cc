// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/runtime.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <system_error>

#include "common/log.h"
#include "common/version.h"
#include "config/config_diff.h"
#include "proxy/admin/admin_server.h"
#include "proxy/io/io_uring_access.h"
#include "proxy/runtime/takeover_channel.h"
#include "proxy/transport/rdma/rdma_context.h"

namespace rdmagw {

namespace {

constexpr auto kAskTimeout = std::chrono::milliseconds(2000);
constexpr auto kReloadTimeout = std::chrono::milliseconds(10000);
// Why an undrain is refused once SIGTERM started the drain.
constexpr const char* kStopNotUndone =
    "rdmagw is shutting down (SIGTERM); that drain ends in a stop and cannot be undone";

double unix_now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : "; ") + i;
  return out;
}

// Merging order for a peer's state across workers: the best one wins.
// worker_cpus: pins the calling thread (a worker, before it allocates, so
// that its memory comes from its CPU's node). "" or what went wrong, naming
// the key.
std::string pin_worker(const Config& config, unsigned index) {
  if (config.worker_cpus.empty()) return "";
  size_t at = index % config.worker_cpus.size();
  unsigned cpu = config.worker_cpus[at];
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (rc == 0) {
    log::info("worker_pinned").kv("worker", index).kv("cpu", cpu);
    return "";
  }
  std::string allowed;
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof(mine), &mine) == 0) {
    for (unsigned c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mine)) allowed += (allowed.empty() ? "" : ",") + std::to_string(c);
  }
  return "worker_cpus[" + std::to_string(at) + "]: cannot run worker " + std::to_string(index) + " on CPU " +
         std::to_string(cpu) + ": " + strerror(rc) + " (this process may use CPUs " + allowed + ")";
}

int state_rank(const std::string& state) {
  if (state == "up") return 0;
  if (state == "connecting") return 1;
  if (state == "resuming") return 2;
  if (state == "idle") return 3;
  if (state == "down") return 4;
  return 5;  // removed
}

}  // namespace

Runtime::Runtime(RuntimeOptions options, std::shared_ptr<const Config> config)
    : options_(std::move(options)), config_(std::move(config)) {}

Runtime::~Runtime() {
  // Only reached with threads left when run() ended early (an exception):
  // make sure the workers stop rather than join forever.
  stop_level_.store(static_cast<int>(StopLevel::kNow));
  takeover_stop_ = true;
  if (takeover_thread_.joinable()) takeover_thread_.join();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

std::shared_ptr<const Config> Runtime::config() {
  std::lock_guard lock(mu_);
  return config_;
}

bool Runtime::check_rdma() {
  // RDMA is used when asked for (auto | rdma) and this host can: a device,
  // and enough lockable memory for every worker's registered slab.
  const Config& config = *config_;
  if (config.tunnel.transport == TransportMode::kTcp) return true;
  rdma_reason_ = transport::rdma_unavailable_reason(config.tunnel.rdma, config.workers);
  rdma_ = rdma_reason_.empty();
  if (rdma_) {
    // A device is here: a configuration it cannot honour is an error in
    // auto as in rdma, not a reason to fall back quietly.
    std::string error = transport::rdma_config_error(config.tunnel.rdma);
    if (!error.empty()) {
      log::error("rdma_config_exceeds_device").kv("reason", error);
      return false;
    }
    rdma_reason_ = "RDMA device available";
  } else if (config.tunnel.transport == TransportMode::kRdma) {
    log::error("transport_unavailable").kv("key", "tunnel.transport").kv("value", "rdma").kv("reason", rdma_reason_);
    return false;
  }
  return true;
}

namespace {

// The tunnel's TCP sockets from worker `from` on (one per worker,
// SO_REUSEPORT), appended to *fds; false with *key and *error, nothing
// appended. The port is claimed first unless sockets of ours hold it.
bool open_tunnel_fds(const Config& config, std::vector<int>* fds, std::string* key, std::string* error) {
  auto at = make_tcp_endpoint(config.tunnel.address, config.tunnel.tcp_port, error);
  if (!at) {
    *key = "tunnel.address";
    return false;
  }
  *key = "tunnel.tcp_port";
  if (fds->empty() && !claim_tcp_port(*at, error)) {
    *error = at->to_string() + ": " + *error;
    return false;
  }
  std::vector<int> opened;
  for (auto w = static_cast<unsigned>(fds->size()); w < config.workers; ++w) {
    int fd = open_listening_socket(*at, true, error);
    if (fd < 0) {
      *error = at->to_string() + ": " + *error;
      for (int f : opened) ::close(f);
      return false;
    }
    opened.push_back(fd);
  }
  fds->insert(fds->end(), opened.begin(), opened.end());
  return true;
}

}  // namespace

bool Runtime::open_tunnel_sockets() {
  // A takeover brought the old process's sockets: open only what is missing.
  std::string key, error;
  if (open_tunnel_fds(*config_, &tunnel_.tcp_fds, &key, &error)) return true;
  log::error("listen_failed").kv("key", key).kv("reason", error);
  return false;
}

void Runtime::worker_thread(unsigned index) {
  std::shared_ptr<const Config> config;
  ListenerSet listeners;
  {
    std::lock_guard lock(mu_);
    config = config_;
    listeners = listeners_;
  }
  std::string pin_error = pin_worker(*config, index);
  {
    Worker worker(index, std::move(config), std::move(listeners), tunnel_, stop_level_, *metrics_[index],
                  *mailboxes_[index], *directory_, access_log_file_);
    // The table before the streams a takeover brings: whether their targets
    // are allowed may depend on it (services:this-node).
    worker.set_services(services_feed_.state().table);
    if (index < worker_imports_.size()) worker.import_on_init(std::move(worker_imports_[index]), inherited_fds_);
    if (local_redirect_) worker.redirect_local_legs(*local_redirect_);
    std::string error = pin_error;
    bool ok = error.empty() && worker.init(&error);
    {
      std::lock_guard lock(workers_mu_);
      ++initialized_;
      if (ok) {
        workers_[index] = &worker;
      } else {
        init_failed_ = true;
        log::error("worker_failed").kv("reason", error);
      }
      if (index == 0) features_ = worker.features().describe();
    }
    workers_cv_.notify_all();
    if (ok) {
      // Wait until every worker is ready, so a failure stops them all.
      bool run = false;
      {
        std::unique_lock lock(workers_mu_);
        workers_cv_.wait(lock, [&] { return initialized_ == workers_.size(); });
        run = !init_failed_;
      }
      if (run) worker.run();
    }
    mailboxes_[index]->close();
    std::lock_guard lock(workers_mu_);
    workers_[index] = nullptr;
  }
  finished_.fetch_add(1);
}

bool Runtime::prepare_workers() {
  // Before the admin thread starts: it reads these vectors without a lock.
  unsigned count = config_->workers;
  workers_.assign(count, nullptr);
  for (unsigned w = 0; w < count; ++w) {
    metrics_.push_back(std::make_unique<metrics::WorkerMetrics>());
    mailboxes_.push_back(std::make_unique<WorkerMailbox>());
    std::string error;
    if (!mailboxes_.back()->init(&error)) {
      log::error("worker_failed").kv("reason", error);
      return false;
    }
  }
  std::vector<WorkerMailbox*> mailboxes;
  for (auto& m : mailboxes_) mailboxes.push_back(m.get());
  directory_ = std::make_unique<SessionDirectory>(std::move(mailboxes));
  return true;
}

bool Runtime::start_workers() {
  unsigned count = config_->workers;
  for (unsigned w = 0; w < count; ++w) {
    try {
      threads_.emplace_back([this, w] { worker_thread(w); });
    } catch (const std::system_error& e) {
      // E.g. a pids limit. The workers already started wait for all to
      // initialize: count the missing ones as failed so they stop.
      log::error("worker_failed").kv("worker", w).kv("reason", std::string("cannot start its thread: ") + e.what());
      std::lock_guard lock(workers_mu_);
      init_failed_ = true;
      initialized_ += count - w;
      workers_cv_.notify_all();
      break;
    }
  }
  std::unique_lock lock(workers_mu_);
  workers_cv_.wait(lock, [&] { return initialized_ == count; });
  return !init_failed_;
}

int Runtime::run() {
  // Before anything is bound: a runtime's default seccomp profile blocks
  // io_uring, and each worker would otherwise fail with a bare errno.
  if (std::string blocked = io::io_uring_blocked_reason(); !blocked.empty()) {
    log::error("io_uring_unavailable").kv("reason", blocked);
    return 1;
  }
  if (!check_rdma()) return 1;

  // Signals go to this thread only (sigtimedwait below); workers and the
  // admin thread inherit the mask and never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  tunnel_.rdma = rdma_;
  tunnel_.handshakes = std::make_unique<tunnel::HandshakeBudget>(config_->tunnel.limits.handshakes,
                                                                 config_->tunnel.limits.handshakes_per_address);
  transport_ = rdma_ ? (config_->tunnel.transport == TransportMode::kRdma ? "rdma" : "rdma,tcp") : "tcp";
  std::string key, error;
  TakeoverStart takeover = TakeoverStart::kNobody;
  if (options_.takeover) {
    takeover = take_over(&error);
    if (takeover == TakeoverStart::kFailed) {
      log::error("takeover_failed").kv("address", takeover_address(*config_)).kv("reason", error);
      return 1;
    }
    if (takeover == TakeoverStart::kNobody)
      log::info("takeover_none")
          .kv("address", takeover_address(*config_))
          .kv("reason", "no rdmagw runs this configuration here; starting afresh");
  }
  // A takeover's inherited listeners that the configuration no longer has
  // close at the commit: until then the old process may still need them.
  bool ok = open_listener_set(*config_, inherited_listeners_, &listeners_, &key, &error);
  if (!ok) {
    log::error("listen_failed").kv("key", key).kv("reason", error);
    abandon_takeover("the new process cannot open its listeners: " + key + ": " + error);
    return 1;
  }
  if (!config_->access_log.path.empty() && !access_log_file_.open(config_->access_log.path, &error)) {
    log::error("access_log_failed").kv("key", "access_log.path").kv("reason", error);
    abandon_takeover("the new process cannot open its access log: " + error);
    return 1;
  }
  if (!attach_local_legs(&error)) {
    log::error("takeover_failed").kv("address", takeover_address(*config_)).kv("reason", error);
    abandon_takeover(error);
    return 1;
  }
  if (!open_tunnel_sockets() || !prepare_workers()) {
    abandon_takeover("the new process could not start (its log says why)");
    return 1;
  }
  if (takeover == TakeoverStart::kTookOver && !commit_takeover(&error)) {
    log::error("takeover_failed").kv("address", takeover_address(*config_)).kv("reason", error);
    return 1;
  }
  take_charge_of_local_legs();
  // The admin endpoint is bound before the workers start, so a port in use
  // fails the start like any other listener; it answers 503 on /ready until
  // the workers are up. After a takeover the old process holds it until it
  // exits, after RELEASED.
  auto admin_ep = parse_host_port(config_->admin, &error);
  admin::AdminServer admin_server(*this);
  if (!admin_ep || (takeover != TakeoverStart::kTookOver && !admin_server.start(*admin_ep, &error))) {
    log::error("listen_failed").kv("key", "admin").kv("address", config_->admin).kv("reason", error);
    return 1;
  }
  // The first table is in each worker's mailbox before its first accept.
  services_feed_.watch(config_->services.file);
  poll_services();
  if (!start_workers()) {
    stop_level_.store(static_cast<int>(StopLevel::kNow));
    admin_server.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    return 1;
  }
  inherited_fds_.reset();  // what no worker claimed closes now
  if (takeover == TakeoverStart::kTookOver) {
    // The old process lets go of the admin port as it exits.
    bool bound = false;
    for (int i = 0; i < 100 && !bound; ++i) {
      bound = admin_server.start(*admin_ep, &error);
      if (!bound) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!bound) log::error("listen_failed").kv("key", "admin").kv("address", config_->admin).kv("reason", error);
  }
  std::string listeners;
  for (const auto& l : config_->listeners) {
    // As the configuration writes it: a transparent listener's socket is a
    // TCP one, but "tcp:" would hide what it is.
    std::string listen = l.listen.to_string();
    if (l.transparent && listen.starts_with("tcp:")) listen = "transparent:" + listen.substr(4);
    listeners += (listeners.empty() ? "" : ",") + listen;
  }
  {
    // A POST /drain may have come while the workers started.
    std::lock_guard lock(mu_);
    ready_ = !draining_;
  }
  log::info("ready")
      .kv("version", RDMAGW_VERSION)
      .kv("commit", build_commit())
      .kv("workers", config_->workers)
      .kv("listeners", listeners)
      .kv("tunnel", "tcp:" + config_->tunnel.address + ":" + std::to_string(config_->tunnel.tcp_port))
      .kv("transport", transport_)
      .kv("transport_reason", rdma_reason_)
      .kv("admin", config_->admin)
      .kv("auth", auth_mode_name(config_->tunnel.auth.mode))
      .kv("io_uring", features_);
  // The service manager's "started" is this moment too: a unit ordered
  // After=rdmagw.service starts once these listeners accept.
  notifier_.ready("Ready: " + std::to_string(config_->listeners.size()) + " listeners, " +
                  std::to_string(config_->workers) + " workers, transport " + transport_ + ", admin " + config_->admin);
  log_certificate_validity(*config_);
  const AuthConfig& auth = config_->tunnel.auth;
  if (auth.configured && auth.mode == AuthMode::kNone)
    log::warn("auth_disabled")
        .kv("reason", "tunnel.auth.mode is none: any host that reaches " + config_->tunnel.address +
                          " may open streams to every target")
        .kv("fix", "tunnel.auth: {mode: psk, key_files: [FILE]} (docs/security.md)");
  running_ = true;  // reloads are taken from here on
  takeover_thread_ = std::thread([this] { serve_takeovers(); });
  wait_for_signals();
  takeover_stop_ = true;
  takeover_thread_.join();
  for (auto& t : threads_) t.join();
  threads_.clear();
  admin_server.stop();
  log::info("stopped");
  return 0;
}

void Runtime::wait_for_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGUSR1);
  timespec poll{0, 100 * 1000 * 1000};
  while (finished_.load() < workers_.size()) {
    poll_services();
    siginfo_t info;
    int sig = sigtimedwait(&signals, &info, &poll);
    if (sig == SIGUSR1) {
      reopen_access_log();
    } else if (sig == SIGHUP) {
      log::info("reload_requested").kv("signal", "SIGHUP");
      try {
        reload();
      } catch (const std::exception& e) {
        // The running configuration stays; keep serving and handling signals.
        log::error("reload_failed").kv("reason", std::string("internal error: ") + e.what());
      }
    } else if (sig == SIGTERM || sig == SIGINT) {
      int previous = stop_level_.load();
      int next = previous == 0 ? static_cast<int>(StopLevel::kDrain) : static_cast<int>(StopLevel::kNow);
      {
        // Workers close the listening sockets as they drain; main's hold
        // must not keep them open.
        // The level is set under the lock too: an undrain checks it there.
        std::lock_guard lock(mu_);
        ready_ = false;
        draining_ = true;
        listeners_.clear();
        stop_level_.store(next);
      }
      log::info(next == 1 ? "shutdown_requested" : "shutdown_forced").kv("signal", strsignal(sig));
      if (next == 1)
        notifier_.stopping("Draining: open streams have up to shutdown_timeout_ms (" +
                           std::to_string(config()->shutdown_timeout_ms) + " ms)");
      else
        notifier_.status("Stopping now: a second signal");
    }
  }
}

bool Runtime::on_every_worker(const std::function<void(Worker&)>& task, std::chrono::milliseconds timeout,
                              std::string* error) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<bool> done;
  };
  // Marks its worker answered when the task has run, or when it is dropped
  // unrun because that worker has stopped: either way nobody waits for it.
  struct Done {
    Done(std::shared_ptr<Wait> w, unsigned i) : wait(std::move(w)), index(i) {}
    Done(const Done&) = delete;  // one per task: a copy would answer twice
    Done& operator=(const Done&) = delete;
    std::shared_ptr<Wait> wait;
    unsigned index;
    ~Done() {
      {
        std::lock_guard lock(wait->mu);
        wait->done[index] = true;
      }
      wait->cv.notify_all();
    }
  };
  auto wait = std::make_shared<Wait>();
  wait->done.assign(mailboxes_.size(), false);
  for (unsigned i = 0; i < mailboxes_.size(); ++i) {
    auto done = std::make_shared<Done>(wait, i);
    mailboxes_[i]->post([this, i, task, done] {
      Worker* worker = nullptr;
      {
        std::lock_guard lock(workers_mu_);
        worker = workers_[i];
      }
      if (worker) task(*worker);
    });
  }
  std::unique_lock lock(wait->mu);
  bool all = wait->cv.wait_for(
      lock, timeout, [&] { return std::all_of(wait->done.begin(), wait->done.end(), [](bool d) { return d; }); });
  if (!all) {
    for (unsigned i = 0; i < wait->done.size(); ++i) {
      if (!wait->done[i]) {
        *error = "worker " + std::to_string(i) + " did not answer within " + std::to_string(timeout.count()) + " ms";
        break;
      }
    }
  }
  return all;
}

bool Runtime::peers(std::vector<admin::PeerInfo>* out, std::string* error) {
  auto answers = std::make_shared<std::vector<std::vector<admin::PeerInfo>>>(mailboxes_.size());
  if (!on_every_worker([answers](Worker& w) { w.describe_peers(&(*answers)[w.index()]); }, kAskTimeout, error))
    return false;
  // One entry per peer name, sessions of every worker together.
  for (auto& per_worker : *answers) {
    for (auto& peer : per_worker) {
      auto it = std::find_if(out->begin(), out->end(), [&](const admin::PeerInfo& p) { return p.name == peer.name; });
      if (it == out->end()) {
        out->push_back(std::move(peer));
        continue;
      }
      if (peer.configured && !it->configured) {
        // The configured view (address, transport, state) leads.
        std::swap(it->sessions, peer.sessions);
        std::swap(*it, peer);
      }
      bool dialled = peer.configured || peer.discovered;
      if (dialled && state_rank(peer.state) < state_rank(it->state)) it->state = peer.state;
      if (it->last_error.empty()) it->last_error = peer.last_error;
      if (it->last_close.empty()) it->last_close = peer.last_close;
      it->waiting_streams += peer.waiting_streams;
      for (auto& s : peer.sessions) it->sessions.push_back(std::move(s));
    }
  }
  return true;
}

bool Runtime::streams(std::vector<admin::StreamInfo>* out, std::string* error) {
  auto answers = std::make_shared<std::vector<std::vector<admin::StreamInfo>>>(mailboxes_.size());
  if (!on_every_worker([answers](Worker& w) { w.describe_streams(&(*answers)[w.index()]); }, kAskTimeout, error))
    return false;
  for (auto& per_worker : *answers)
    for (auto& s : per_worker) out->push_back(std::move(s));
  std::stable_sort(out->begin(), out->end(),
                   [](const admin::StreamInfo& a, const admin::StreamInfo& b) { return a.age_ms > b.age_ms; });
  return true;
}

std::vector<const metrics::WorkerMetrics*> Runtime::worker_metrics() {
  std::vector<const metrics::WorkerMetrics*> out;
  for (const auto& m : metrics_) out.push_back(m.get());
  return out;
}

uint64_t Runtime::live_streams() const {
  int64_t total = 0;
  for (const auto& m : metrics_) {
    m->for_each_listener([&](const std::string&, const metrics::ListenerMetrics& l) { total += l.active.value(); });
    total += m->target_streams_active.value();
  }
  return total > 0 ? static_cast<uint64_t>(total) : 0;
}

admin::Status Runtime::status() {
  admin::Status s;
  s.version = RDMAGW_VERSION;
  s.commit = build_commit();
  s.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  s.ready = ready_.load();
  s.draining = draining_.load();
  s.not_ready_reason = s.draining ? "draining" : s.ready ? "" : "starting";
  s.transport = transport_;
  s.transport_reason = rdma_reason_;
  {
    std::lock_guard lock(workers_mu_);
    s.io_uring = features_;
  }
  std::lock_guard lock(mu_);
  s.node = config_->node;
  s.config_file = options_.config_file;
  s.config_generation = generation_;
  s.workers = config_->workers;
  s.last_reload = last_reload_;
  s.last_reload_unix = last_reload_unix_;
  s.services = services_status();
  s.local_legs = local_legs_status();
  return s;
}

void Runtime::poll_services() {
  // Held while posting too: two polls (the main thread's, a reload's) post
  // their tables in the order they read them.
  std::lock_guard lock(services_poll_mu_);
  std::shared_ptr<const ServiceTable> table;
  if (!services_feed_.poll(&table)) return;
  // Posted before the workers start, it is each one's first task.
  for (size_t i = 0; i < mailboxes_.size(); ++i) {
    mailboxes_[i]->post([this, table, i] {
      Worker* worker = nullptr;
      {
        std::lock_guard lock(workers_mu_);
        worker = workers_[i];
      }
      if (worker) worker->set_services(table);
    });
  }
}

admin::ServicesStatus Runtime::services_status() const { return services_status(services_feed_.state()); }

admin::ServicesStatus Runtime::services_status(const ServicesFeed::State& state) {
  admin::ServicesStatus s;
  s.file = state.file;
  s.table_file = state.table_file;
  s.loaded = state.table != nullptr;
  s.loaded_unix = state.loaded_unix;
  s.error = state.error;
  s.loads = state.loads;
  s.load_failures = state.failures;
  if (state.table) {
    s.api = state.table->api();
    s.services = state.table->services().size();
    s.endpoints = state.table->endpoint_count();
  }
  return s;
}

bool Runtime::services(admin::ServicesReport* out, std::string* error) {
  ServicesFeed::State state = services_feed_.state();  // one snapshot: the status is the table's
  out->status = services_status(state);
  out->direct = std::string(services_direct_name(config()->services.direct));
  out->table = state.table;
  struct PerWorker {
    ServiceRouter::OpenCounts streams;
    std::vector<Worker::DiscoveredState> links;
  };
  auto asked = std::make_shared<std::vector<PerWorker>>(mailboxes_.size());
  bool ok = on_every_worker(
      [asked](Worker& w) {
        PerWorker& mine = (*asked)[w.index()];
        w.count_service_streams(&mine.streams);
        w.describe_discovered(&mine.links);
      },
      kAskTimeout, error);
  if (!ok) return false;
  // One worker's link may be up while another's has not dialled: the best
  // state stands for the endpoint, and the error of one that is down.
  auto rank = [](std::string_view s) {
    for (int i = 0; std::string_view best : {"up", "resuming", "connecting", "down", "idle"}) {
      if (s == best) return i;
      ++i;
    }
    return 5;
  };
  for (const PerWorker& worker : *asked) {
    for (const auto& [key, open] : worker.streams) out->streams[key] += open;
    for (const Worker::DiscoveredState& link : worker.links) {
      AddressPort at;
      if (!service_address::parse(link.address.c_str(), &at.address)) continue;
      admin::EndpointTunnel& t = out->tunnels[at];
      if (t.state.empty() || rank(link.state) < rank(t.state)) t.state = std::string(link.state);
      if (link.state == "down" && t.error.empty()) t.error = link.error;
    }
  }
  for (auto& [ip, t] : out->tunnels)
    if (t.state != "down") t.error.clear();
  return true;
}

admin::ReloadResult Runtime::refuse_reload(std::vector<std::string> errors) {
  process_metrics_.config_reload_failures.add();
  log::error("reload_failed").kv("file", options_.config_file).kv("errors", errors.size()).kv("kept", "running config");
  for (const auto& e : errors) log::error("reload_error").kv("error", e);
  admin::ReloadResult result;
  result.ok = false;
  result.errors = std::move(errors);
  std::lock_guard lock(mu_);
  last_reload_ = result;
  last_reload_unix_ = unix_now();
  return result;
}

admin::ReloadResult Runtime::reload() {
  std::lock_guard reloading(reload_mu_);
  if (!running_) return refuse_reload({"rdmagw is still starting; reload once /ready answers"});
  if (draining_) return refuse_reload({"rdmagw is draining; a reload would reopen nothing"});
  // Only a reload that goes ahead is announced: the two refused above change
  // nothing, and a READY=1 during a drain would tell the manager otherwise.
  notifier_.reloading("Reloading " + options_.config_file);
  admin::ReloadResult result;
  try {
    result = load_and_apply();
  } catch (...) {
    announce_reload_end(nullptr);
    throw;
  }
  announce_reload_end(&result);
  return result;
}

void Runtime::announce_reload_end(const admin::ReloadResult* result) {
  // SIGTERM arrived during the reload: STOPPING=1 went out, and READY=1
  // now would not undo it (the drain goes on), only confuse the record.
  if (draining_) return;
  if (!result) {
    notifier_.ready("Ready: reload failed with an internal error; running configuration kept");
  } else if (result->ok) {
    notifier_.ready("Ready: reloaded " + options_.config_file + ", configuration generation " +
                    std::to_string(result->generation));
  } else {
    size_t errors = result->errors.size();
    notifier_.ready("Ready: reload failed (" + std::to_string(errors) + (errors == 1 ? " error" : " errors") +
                    ", see the log); running configuration kept");
  }
}

admin::ReloadResult Runtime::load_and_apply() {
  ConfigResult loaded = load_config_file(options_.config_file);
  if (!loaded.errors.empty()) {
    std::vector<std::string> errors;
    for (const auto& e : loaded.errors) errors.push_back(e.to_string());
    return refuse_reload(std::move(errors));
  }
  std::shared_ptr<const Config> running = config();
  std::vector<std::string> restart = restart_only_changes(*running, *loaded.config);
  if (!restart.empty()) {
    std::vector<std::string> errors;
    for (const auto& r : restart)
      errors.push_back(options_.config_file + ": " + r + " needs a restart; a reload cannot apply it");
    return refuse_reload(std::move(errors));
  }
  ListenerSet current, next;
  {
    std::lock_guard lock(mu_);
    current = listeners_;
  }
  std::string key, error;
  if (!open_listener_set(*loaded.config, current, &next, &key, &error))
    return refuse_reload({options_.config_file + ": " + key + ": " + error});
  redirect_listener_ports(next);

  const std::string& log_path = loaded.config->access_log.path;
  if (!log_path.empty() && log_path != running->access_log.path && !access_log_file_.open(log_path, &error))
    return refuse_reload({options_.config_file + ": access_log.path: " + error});

  std::shared_ptr<const Config> config = loaded.config;
  // A services.file new to this configuration is read now, and its table
  // reaches each worker before the routes that use it.
  services_feed_.watch(config->services.file);
  poll_services();
  std::string slow;
  bool all = on_every_worker([config, next](Worker& w) { w.apply(config, next); }, kReloadTimeout, &slow);
  admin::ReloadResult result;
  result.ok = true;
  result.changes = describe_changes(*running, *config);
  uint64_t generation;
  {
    std::lock_guard lock(mu_);
    config_ = config;
    // A drain that began meanwhile let go of the sockets; so do we.
    listeners_ = draining_ ? ListenerSet{} : std::move(next);
    generation = ++generation_;
    result.generation = generation;
    last_reload_ = result;
    last_reload_unix_ = unix_now();
  }
  log::Level level;
  if (!options_.log_level_from_command_line && log::parse_level(config->log_level, &level)) log::set_level(level);
  process_metrics_.config_reloads.add();
  log::info("config_reloaded")
      .kv("file", options_.config_file)
      .kv("generation", generation)
      .kv("changes", result.changes.empty() ? std::string("none") : join(result.changes));
  // A worker that was slow still applies it when it gets to its mailbox.
  if (!all) log::warn("reload_slow").kv("reason", slow);
  log_certificate_validity(*config);
  return result;
}

void Runtime::reopen_access_log() {
  // logrotate moved the file and sends SIGUSR1 (docs/logging.md): lines go
  // to a new file at the configured path from now on.
  std::string path = access_log_file_.path(), error;
  if (path.empty()) {
    log::info("access_log_reopened").kv("signal", "SIGUSR1").kv("path", "none (access_log.path is not set)");
    return;
  }
  if (access_log_file_.reopen(&error))
    log::info("access_log_reopened").kv("signal", "SIGUSR1").kv("path", path);
  else
    log::error("access_log_failed").kv("key", "access_log.path").kv("reason", error).kv("kept", "the open file");
}

void Runtime::log_certificate_validity(const Config& config) {
  const auto& creds = config.tunnel.auth.credentials;
  if (!creds) return;
  // Peers refuse a certificate outside its dates; the process keeps the one
  // it has until a reload brings another, and says so (and the metric
  // rdmagw_certificate_expiry_seconds lets an alert say it sooner).
  int64_t left = creds->seconds_left();
  int64_t until = creds->seconds_until_valid();
  if (left < 0 || until > 0)
    log::error("certificate_invalid")
        .kv("file", config.tunnel.auth.cert_file)
        .kv("reason", left < 0 ? "expired " + std::to_string(-left / 3600) + " hours ago"
                               : "valid only in " + std::to_string(until / 3600) + " hours")
        .kv("effect", "peers refuse this node until a reload brings a valid certificate");
  else if (left < 7 * 86400)
    log::warn("certificate_expiring").kv("file", config.tunnel.auth.cert_file).kv("hours_left", left / 3600);
}

uint64_t Runtime::drain() {
  // Not reload_mu_: a drain must not wait behind a reload (a reload that
  // ends after it lets go of what it opened, see load_and_apply).
  std::lock_guard draining(drain_mu_);
  bool first = false;
  {
    std::lock_guard lock(mu_);
    first = !draining_;
    draining_ = true;
    ready_ = false;
    // The connections still open keep their slots: an undrain counts them.
    for (const auto& l : listeners_)
      drained_loads_.push_back({l->config.listen, l->config.transparent, l->fds->load()});
    listeners_.clear();
  }
  if (first) {
    log::info("drain_requested").kv("source", "admin").kv("streams", live_streams());
    // Not STOPPING=1: the process stays up until SIGTERM, and systemd would
    // take STOPPING=1 as the start of a stop it then times out and kills.
    notifier_.status("Draining (POST /drain): new connections refused until POST /undrain or a restart");
    std::string error;
    if (!on_every_worker([](Worker& w) { w.stop_accepting(); }, kAskTimeout, &error))
      log::warn("drain_slow").kv("reason", error);
  }
  return live_streams();
}

bool Runtime::undrain(std::string* error) {
  std::lock_guard no_reload(reload_mu_);
  std::lock_guard no_drain(drain_mu_);
  if (!running_) {
    *error = "rdmagw is still starting; undrain once /ready answers";
    return false;
  }
  if (stop_level_.load() != static_cast<int>(StopLevel::kRunning)) {
    *error = kStopNotUndone;
    return false;
  }
  if (!draining_) return true;  // accepting already: nothing to undo
  std::shared_ptr<const Config> running = config();
  // The sockets are opened here, as at start, so that a port taken
  // meanwhile is one clear refusal and the drain stays as it was.
  ListenerSet listeners;
  std::string key;
  if (!open_listener_set(*running, {}, &listeners, &key, error)) {
    *error = key + ": " + *error + "; still draining";
    return false;
  }
  std::vector<int> opened;
  if (!open_tunnel_fds(*running, &opened, &key, error)) {
    *error = key + ": " + *error + "; still draining";
    return false;
  }
  // Each worker takes its own; any not taken (a worker stopping) close with this.
  auto tunnel_fds = std::make_shared<std::vector<UniqueFd>>();
  for (int fd : opened) tunnel_fds->emplace_back(fd);
  {
    std::lock_guard lock(mu_);
    // A SIGTERM that came meanwhile wins: what was opened closes unused.
    if (stop_level_.load() != static_cast<int>(StopLevel::kRunning)) {
      *error = kStopNotUndone;
      return false;
    }
    for (const auto& socket : listeners)
      for (const DrainedLoad& d : drained_loads_)
        if (d.listen == socket->config.listen && d.transparent == socket->config.transparent)
          socket->fds->keep_load(d.load);
    drained_loads_.clear();
    listeners_ = listeners;
    draining_ = false;
    ready_ = true;
  }
  redirect_listener_ports(listeners);
  std::string slow;
  if (!on_every_worker(
          [listeners, tunnel_fds](Worker& w) { w.start_accepting(listeners, std::move((*tunnel_fds)[w.index()])); },
          kAskTimeout, &slow))
    log::warn("undrain_slow").kv("reason", slow);
  log::info("undrained").kv("source", "admin").kv("listeners", listeners.size()).kv("streams", live_streams());
  // A SIGTERM since the commit above went out as STOPPING=1: no READY=1 after it.
  std::lock_guard lock(mu_);
  if (!draining_)
    notifier_.ready("Ready: undrained (POST /undrain), " + std::to_string(listeners.size()) + " listeners");
  return true;
}

}  // namespace rdmagw
