// SPDX-License-Identifier: Apache-2.0
#pragma once
// The process: opens the sockets, runs one thread per worker and the admin
// thread, waits for signals, and applies reloads. It is also what the admin
// endpoint asks (admin::Backend): counters are read directly, everything a
// worker owns is asked for through the worker's mailbox.
//
// Why one class of this size (about 40 methods): it is the one owner of
// the process's threads, sockets and configuration, and each admin call
// or signal is one of its methods. It is split by file: runtime.cc (start,
// signals, reload, drain and undrain, what the admin endpoint asks),
// runtime_takeover.cc, runtime_local_legs.cc.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "config/config.h"
#include "proxy/admin/admin_model.h"
#include "proxy/runtime/listener_sockets.h"
#include "proxy/runtime/service_notify.h"
#include "proxy/runtime/services_feed.h"
#include "proxy/runtime/session_directory.h"
#include "proxy/runtime/takeover_channel.h"
#include "proxy/runtime/takeover_image.h"
#include "proxy/runtime/worker.h"
#include "proxy/runtime/worker_mailbox.h"

namespace rdmagw {

struct RuntimeOptions {
  std::string config_file;
  bool log_level_from_command_line = false;  // then a reload leaves the level alone
  bool takeover = false;                     // --takeover: take over from the process running this configuration
};

class Runtime final : public admin::Backend {
 public:
  Runtime(RuntimeOptions options, std::shared_ptr<const Config> config);
  ~Runtime() override;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The whole life of the process; returns its exit status.
  int run();

  // admin::Backend (admin thread); reload() also serves SIGHUP.
  admin::Status status() override;
  std::shared_ptr<const Config> config() override;
  std::vector<const metrics::WorkerMetrics*> worker_metrics() override;
  const metrics::ProcessMetrics& process_metrics() override { return process_metrics_; }
  bool peers(std::vector<admin::PeerInfo>* out, std::string* error) override;
  bool streams(std::vector<admin::StreamInfo>* out, std::string* error) override;
  bool services(admin::ServicesReport* out, std::string* error) override;
  admin::ReloadResult reload() override;
  uint64_t drain() override;
  bool undrain(std::string* error) override;

 private:
  bool check_rdma();
  bool open_tunnel_sockets();
  bool prepare_workers();
  bool start_workers();
  void wait_for_signals();
  void worker_thread(unsigned index);
  // Runs `task(worker)` on every worker and waits up to `timeout` for all.
  // False with *error naming the first worker that did not answer.
  bool on_every_worker(const std::function<void(Worker&)>& task, std::chrono::milliseconds timeout, std::string* error);
  uint64_t live_streams() const;
  // Reads the services file if it changed, and hands a new table to every
  // worker (the main thread every 100 ms; a reload at once).
  void poll_services();
  admin::ServicesStatus services_status() const;
  static admin::ServicesStatus services_status(const ServicesFeed::State& state);
  // Mode cert: says whether this node's certificate is out of its dates, or
  // will be within a week (at start and after each reload).
  // SIGUSR1: access_log.path opened again (after logrotate moved it).
  void reopen_access_log();
  static void log_certificate_validity(const Config& config);
  admin::ReloadResult refuse_reload(std::vector<std::string> errors);
  // reload()'s work once it is known to go ahead (under reload_mu_).
  admin::ReloadResult load_and_apply();
  // READY=1 after a reload (nullptr: it threw), unless a drain began meanwhile.
  void announce_reload_end(const admin::ReloadResult* result);

  // --- takeover (runtime_takeover.cc; docs/operations.md, "Takeover") ---
  enum class TakeoverStart { kNobody, kTookOver, kFailed };
  // New process, before opening any socket: the running one's sockets and state.
  TakeoverStart take_over(std::string* error);
  // New process, once everything that can fail without serving is done
  // (listeners opened, workers prepared), before any inherited socket is
  // used: ADOPTED, then the old process's RELEASED. False (with *error, the
  // takeover abandoned) if the old process carries on: then we must not serve.
  bool commit_takeover(std::string* error);
  // New process, before commit: tells the old one to carry on, and lets go
  // of its sockets without unlinking a unix socket's path.
  void abandon_takeover(const std::string& why);
  // Running process: a thread that waits for a new process to take over.
  void serve_takeovers();
  // `listening`: the channel's socket, which moves to the new process.
  void hand_over(UniqueFd peer, int listening);
  // The channel's name is bound by another process: says by whom, once per
  // holder (our predecessor only after 10 s of waiting).
  void report_taken_channel(std::chrono::steady_clock::time_point busy_since, pid_t* reported);
  // Old process: every worker's image, once all are quiet; false after `timeout`.
  bool collect_images(std::vector<WorkerImage>* images, std::chrono::milliseconds timeout);
  // local_legs.redirect (runtime_local_legs.cc): at start, before the
  // workers. After a takeover that brought the old process's maps, adopts
  // them; false (with why) if it cannot, which ends the takeover (the old
  // process carries on).
  bool attach_local_legs(std::string* error);
  bool adopt_local_legs(std::string* error);
  // After the commit: this build's programs replace the old process's.
  void take_charge_of_local_legs();
  void redirect_listener_ports(const ListenerSet& listeners);
  admin::LocalLegsStatus local_legs_status() const;

  RuntimeOptions options_;
  // systemd's Type=notify (service_notify.h); does nothing without NOTIFY_SOCKET.
  ServiceNotifier notifier_ = ServiceNotifier::from_environment();
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::string features_;
  bool rdma_ = false;
  std::string rdma_reason_ = "configured";
  std::string transport_;  // "tcp" | "rdma" | "rdma,tcp": decided at start, fixed
  // The local legs' programs, attached at start (null: off or unavailable);
  // destroyed after the workers, whose streams use them.
  std::unique_ptr<local::LocalRedirect> local_redirect_;
  admin::LocalLegsStatus local_legs_;    // fixed at start but for the counters
  bool capture_refusal_logged_ = false;  // local_legs_capture_unavailable, said once

  // Guards the fields below it (read by the admin thread, written on reload).
  mutable std::mutex mu_;
  std::shared_ptr<const Config> config_;
  ListenerSet listeners_;  // main's hold on the listening sockets (dropped on drain)
  // A drained listener's connection count, for the listener an undrain opens.
  struct DrainedLoad {
    Endpoint listen;
    bool transparent = false;
    std::shared_ptr<local::ListenerLoad> load;
  };
  std::vector<DrainedLoad> drained_loads_;
  uint64_t generation_ = 1;
  admin::ReloadResult last_reload_;
  double last_reload_unix_ = 0;

  std::mutex reload_mu_;  // one reload at a time (SIGHUP and POST /reload), and no undrain meanwhile
  std::mutex drain_mu_;   // one POST /drain or /undrain at a time
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};  // written under mu_ (with ready_), read anywhere
  std::atomic<bool> running_{false};   // workers started and event=ready logged
  std::atomic<int> stop_level_{0};

  ServicesFeed services_feed_;   // services.file
  std::mutex services_poll_mu_;  // one poll_services() at a time
  TunnelSockets tunnel_;
  local::AccessLogFile access_log_file_;  // access_log.path's (workers write, main reopens)
  metrics::ProcessMetrics process_metrics_;
  // Owned here, not by the workers, so that they outlive the worker threads:
  // the admin thread may read or post to them at any time.
  std::vector<std::unique_ptr<metrics::WorkerMetrics>> metrics_;
  std::vector<std::unique_ptr<WorkerMailbox>> mailboxes_;
  std::unique_ptr<SessionDirectory> directory_;  // resumable inbound sessions, by worker
  // Set by each worker thread while its Worker exists (under workers_mu_).
  std::mutex workers_mu_;
  std::condition_variable workers_cv_;
  std::vector<Worker*> workers_;
  unsigned initialized_ = 0;
  bool init_failed_ = false;
  std::atomic<unsigned> finished_{0};
  std::vector<std::thread> threads_;

  // Takeover. New process: the old one's listeners (reused by address), its
  // sockets not yet claimed, the images for each worker, and the channel
  // until it is told to let go.
  ListenerSet inherited_listeners_;
  std::shared_ptr<std::vector<UniqueFd>> inherited_fds_;
  std::vector<std::vector<WorkerImage>> worker_imports_;
  std::optional<local::LocalRedirectHandover> inherited_legs_;  // the old process redirected its local legs
  UniqueFd takeover_channel_;
  UniqueFd takeover_listener_;  // the channel's listening socket, from WELCOME
  TakeoverPeer takeover_peer_;  // the old process, as the kernel told us
  bool committing_ = false;     // the old process sent WELCOME: it will answer ADOPTED
  // Running process: the thread serving takeovers.
  std::thread takeover_thread_;
  std::atomic<bool> takeover_stop_{false};
  std::atomic<bool> taken_over_{false};
};

}  // namespace rdmagw
