// Takeover (docs/operations.md, "Takeover"): a new rdmagw process started
// with --takeover on the same configuration takes everything over from the
// running one, on the same host, without an application noticing.
//
//   new                                  old (serve_takeovers thread)
//   HELLO ------------------------------> checks the user (SO_PEERCRED)
//                                         freezes every worker: no accept,
//                                         tunnels closed (peers suspend),
//                                         connections' I/O cancelled
//                                         waits until all are quiet
//        <------------------------------ SOCKETS (x n), IMAGE
//   rebuilds listeners, sessions,
//   streams; workers start; dials
//   the peers to resume
//   ADOPTED ----------------------------> lets go of everything without
//                                         touching a socket, exits 0
//
// Until ADOPTED, the old process can still carry on: if the new one fails
// or vanishes, it thaws and its peers resume with it.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/log.h"
#include "proxy/runtime/process_instance.h"
#include "proxy/runtime/runtime.h"
#include "proxy/runtime/takeover_channel.h"

namespace rdmagw {

namespace {

constexpr uint32_t kTakeoverVersion = 1;
constexpr auto kQuietTimeout = std::chrono::milliseconds(5000);

std::vector<uint8_t> text_payload(std::string_view s) { return {s.begin(), s.end()}; }

}  // namespace

Runtime::TakeoverStart Runtime::take_over(std::string* error) {
  bool nobody = false;
  UniqueFd channel = connect_for_takeover(*config_, &nobody, error);
  if (!channel.valid()) return nobody ? TakeoverStart::kNobody : TakeoverStart::kFailed;
  std::vector<uint8_t> hello(8);
  uint32_t pid = static_cast<uint32_t>(getpid());
  for (int i = 0; i < 4; ++i) {
    hello[i] = static_cast<uint8_t>(kTakeoverVersion >> (8 * i));
    hello[4 + i] = static_cast<uint8_t>(pid >> (8 * i));
  }
  if (!send_takeover_message(channel.get(), TakeoverMessage::kHello, hello, {}, error)) return TakeoverStart::kFailed;
  log::info("takeover_started").kv("address", takeover_address(*config_));
  auto fds = std::make_shared<std::vector<UniqueFd>>();
  ProcessImage image;
  for (;;) {
    TakeoverMessageIn m;
    if (!receive_takeover_message(channel.get(), &m, error)) return TakeoverStart::kFailed;
    if (m.type == TakeoverMessage::kSockets) {
      for (auto& fd : m.fds) fds->push_back(std::move(fd));
      continue;
    }
    if (m.type == TakeoverMessage::kRefused) {
      *error = "the running rdmagw refused: " + std::string(m.payload.begin(), m.payload.end());
      return TakeoverStart::kFailed;
    }
    if (m.type != TakeoverMessage::kImage) {
      *error = "unexpected message " + std::to_string(static_cast<uint32_t>(m.type));
      return TakeoverStart::kFailed;
    }
    if (!decode_process_image(m.payload.data(), m.payload.size(), &image, error)) {
      *error = "its image is malformed: " + *error;
      send_takeover_message(channel.get(), TakeoverMessage::kRefused, text_payload(*error), {}, error);
      return TakeoverStart::kFailed;
    }
    if (image.fd_count != fds->size()) {
      *error = "its image names " + std::to_string(image.fd_count) + " sockets, " + std::to_string(fds->size()) + " came";
      return TakeoverStart::kFailed;
    }
    break;
  }
  inherit_process_instance(image.instance);
  unsigned workers = config_->workers;
  for (const ListenerImage& l : image.listeners) {
    std::string why;
    auto endpoint = parse_endpoint(l.endpoint, &why);
    if (!endpoint || l.fds.empty()) continue;  // its sockets close with `fds`
    std::vector<int> raw;
    for (uint32_t i : l.fds) raw.push_back((*fds)[i].release());
    ListenerConfig config;
    config.listen = *endpoint;
    config.transparent = l.transparent;
    inherited_listeners_.push_back(std::make_shared<const ListenerSocket>(
        ListenerSocket{std::move(config), ListenFds::adopt(*endpoint, std::move(raw), workers)}));
  }
  // Tunnel sockets beyond our worker count close: a peer's dial waiting in
  // their backlog is refused and dials again.
  for (size_t w = 0; w < image.tunnel_fds.size() && w < workers; ++w)
    tunnel_.tcp_fds.push_back((*fds)[image.tunnel_fds[w]].release());
  worker_imports_.assign(workers, {});
  for (size_t i = 0; i < image.workers.size(); ++i) worker_imports_[i % workers].push_back(std::move(image.workers[i]));
  inherited_fds_ = std::move(fds);
  takeover_channel_ = std::move(channel);
  return TakeoverStart::kTookOver;
}

void Runtime::confirm_takeover() {
  std::string error;
  if (!send_takeover_message(takeover_channel_.get(), TakeoverMessage::kAdopted, {}, {}, &error))
    log::error("takeover_failed").kv("reason", "could not tell the old process to let go: " + error);
  else log::info("takeover_done");
  takeover_channel_.reset();
}

void Runtime::serve_takeovers() {
  UniqueFd listening;
  while (!takeover_stop_) {
    if (!listening.valid()) {
      // Held by the process we took over from until it exits: try again.
      std::string error;
      listening = listen_for_takeover(*config(), &error);
      if (!listening.valid()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      log::debug("takeover_listening").kv("address", takeover_address(*config()));
    }
    pollfd p{listening.get(), POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    UniqueFd peer(accept4(listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!peer.valid()) continue;
    hand_over(std::move(peer));
    if (taken_over_) return;
  }
}

bool Runtime::collect_images(std::vector<WorkerImage>* images, std::chrono::milliseconds timeout) {
  struct Round {
    std::vector<WorkerImage> images;
    std::vector<char> done;
  };
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto round = std::make_shared<Round>();
    round->images.resize(mailboxes_.size());
    round->done.assign(mailboxes_.size(), 0);
    std::string error;
    on_every_worker([round](Worker& w) { round->done[w.index()] = w.export_for_takeover(&round->images[w.index()]); },
                    kQuietTimeout, &error);
    bool all = std::all_of(round->done.begin(), round->done.end(), [](char d) { return d != 0; });
    if (all) {
      *images = std::move(round->images);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void Runtime::hand_over(UniqueFd peer) {
  std::string who, error;
  pid_t pid = 0;
  auto refuse = [&](const std::string& why) {
    log::warn("takeover_refused").kv("by", who).kv("reason", why);
    std::string ignored;
    send_takeover_message(peer.get(), TakeoverMessage::kRefused, text_payload(why), {}, &ignored);
  };
  if (!takeover_peer_allowed(peer.get(), &who, &pid)) return refuse("another user may not take over this rdmagw");
  TakeoverMessageIn hello;
  if (!receive_takeover_message(peer.get(), &hello, &error)) return refuse(error);
  if (hello.type != TakeoverMessage::kHello || hello.payload.size() < 4 || hello.payload[0] != kTakeoverVersion)
    return refuse("not a takeover request this version understands");
  std::lock_guard reloading(reload_mu_);
  if (draining_ || !running_) return refuse("this rdmagw is draining or still starting");
  log::info("takeover_requested").kv("by", who).kv("streams", live_streams());
  auto started = std::chrono::steady_clock::now();

  if (!on_every_worker([](Worker& w) { w.freeze_for_takeover(); }, kQuietTimeout, &error)) {
    on_every_worker([](Worker& w) { w.thaw_after_takeover(); }, kQuietTimeout, &error);
    return refuse("a worker did not stop in time: " + error);
  }
  std::vector<WorkerImage> workers;
  auto thaw_and_refuse = [&](const std::string& why) {
    std::string ignored;
    on_every_worker([](Worker& w) { w.thaw_after_takeover(); }, kQuietTimeout, &ignored);
    log::warn("takeover_failed").kv("by", who).kv("reason", why).kv("kept", "this process carries on");
    send_takeover_message(peer.get(), TakeoverMessage::kRefused, text_payload(why), {}, &ignored);
  };
  if (!collect_images(&workers, kQuietTimeout)) return thaw_and_refuse("connections did not stop their I/O in time");

  ProcessImage image;
  std::vector<int> fds;
  image.instance = process_instance();
  ListenerSet listeners;
  {
    std::lock_guard lock(mu_);
    listeners = listeners_;
  }
  for (const auto& l : listeners) {
    ListenerImage li;
    li.endpoint = l->config.listen.to_string();
    li.transparent = l->config.transparent;
    for (int fd : l->fds->fds()) {
      li.fds.push_back(static_cast<uint32_t>(fds.size()));
      fds.push_back(fd);
    }
    image.listeners.push_back(std::move(li));
  }
  for (int fd : tunnel_.tcp_fds) {
    image.tunnel_fds.push_back(static_cast<uint32_t>(fds.size()));
    fds.push_back(fd);
  }
  size_t streams = 0;
  for (WorkerImage& w : workers) {
    auto base = static_cast<uint32_t>(fds.size());
    for (auto& s : w.connections.streams) s.fd += base;
    for (auto& p : w.connections.pipes) {
      p.client_fd += base;
      p.server_fd += base;
    }
    streams += w.connections.streams.size();
    fds.insert(fds.end(), w.connections.fds.begin(), w.connections.fds.end());
    w.connections.fds.clear();
  }
  image.workers = std::move(workers);
  image.fd_count = static_cast<uint32_t>(fds.size());
  std::vector<uint8_t> payload = encode_process_image(image);
  for (size_t i = 0; i < fds.size(); i += kMaxFdsPerMessage) {
    std::vector<int> part(fds.begin() + static_cast<long>(i),
                          fds.begin() + static_cast<long>(std::min(fds.size(), i + kMaxFdsPerMessage)));
    if (!send_takeover_message(peer.get(), TakeoverMessage::kSockets, {}, part, &error)) return thaw_and_refuse(error);
  }
  if (!send_takeover_message(peer.get(), TakeoverMessage::kImage, payload, {}, &error)) return thaw_and_refuse(error);
  TakeoverMessageIn answer;
  if (!receive_takeover_message(peer.get(), &answer, &error)) return thaw_and_refuse(error);
  if (answer.type != TakeoverMessage::kAdopted)
    return thaw_and_refuse("the new process refused: " + std::string(answer.payload.begin(), answer.payload.end()));

  // Everything runs in the new process now: ours only closes.
  {
    std::lock_guard lock(mu_);
    for (const auto& l : listeners_) l->fds->hand_over();
    ready_ = false;
  }
  taken_over_ = true;
  // This process is about to exit 0 while the new one carries everything:
  // a service manager watching us must follow it, not take our exit for the
  // service's end. systemd accepts the new MAINPID from us (the main process)
  // only if that process runs in the same unit (docs/deploy.md, "Hosts
  // without containers", takeover).
  if (pid > 0) notifier_.main_pid(pid, "Handed over to pid " + std::to_string(pid) + " (takeover)");
  log::info("taken_over")
      .kv("by", who)
      .kv("streams", streams)
      .kv("sockets", fds.size())
      .kv("image_bytes", payload.size())
      .kv("pause_ms", std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started)
                          .count());
  on_every_worker([](Worker& w) { w.finish_takeover(); }, kQuietTimeout, &error);
}

}  // namespace rdmagw
