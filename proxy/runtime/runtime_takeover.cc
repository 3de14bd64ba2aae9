// SPDX-License-Identifier: Apache-2.0
// Takeover (docs/operations.md, "Takeover"): a new rdmagw process started
// with --takeover on the same configuration takes everything over from the
// running one, on the same host, without an application noticing.
//
//   new                                  old (serve_takeovers thread)
//   checks who listens (SO_PEERCRED)
//   HELLO ------------------------------> checks who connects (SO_PEERCRED)
//        <------------------------------ WELCOME: its credentials
//   checks who answers                    (SCM_CREDENTIALS) and the channel's
//                                         listening socket
//                                         freezes every worker: no accept,
//                                         tunnels closed (peers suspend),
//                                         connections' I/O cancelled
//                                         waits until all are quiet
//        <------------------------------ LOCAL_LEGS (if it redirects its
//                                         local legs and HELLO asked),
//                                         SOCKETS (x n), IMAGE
//   checks the image and every socket
//   against it; opens what the
//   configuration adds, loads its BPF
//   programs on the maps that came
//   (nothing served, nothing attached)
//   ADOPTED ----------------------------> lets go of everything without
//        <------------------------------ RELEASED   touching a socket, exits 0
//   rebuilds sessions and streams; its
//   BPF programs replace the old ones;
//   workers start; dials the peers
//
// Until the old process sends RELEASED it can still carry on: if the new one
// fails or vanishes, or is too slow to send ADOPTED, it thaws and its peers
// resume with it; and the new one neither reads nor writes an inherited
// socket before RELEASED, so exactly one process serves at any time. An old
// rdmagw that predates WELCOME and RELEASED gets HELLO's feature bit and
// ignores it; the new one then relies on SO_PEERCRED alone and on ADOPTED
// reaching the old process in time (docs/operations.md, "Takeover").
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "common/log.h"
#include "proxy/runtime/inherited_sockets.h"
#include "proxy/runtime/process_instance.h"
#include "proxy/runtime/runtime.h"
#include "proxy/runtime/takeover_channel.h"

namespace rdmagw {

namespace {

constexpr uint32_t kTakeoverVersion = 1;
constexpr auto kQuietTimeout = std::chrono::milliseconds(5000);
// How long the old process waits for ADOPTED once the image is out. Its
// peers' sessions are suspended meanwhile and reset after resume_timeout_ms:
// the wait is a quarter of that (1 to 10 s), so that a new process that
// fails leaves time for them to resume here.
uint32_t adopted_timeout_ms(uint32_t resume_timeout_ms) {
  return std::clamp<uint32_t>(resume_timeout_ms / 4, 1000, 10000);
}

std::vector<uint8_t> text_payload(std::string_view s) { return {s.begin(), s.end()}; }

}  // namespace

Runtime::TakeoverStart Runtime::take_over(std::string* error) {
  bool nobody = false;
  UniqueFd channel = connect_for_takeover(*config_, &nobody, error);
  if (!channel.valid()) return nobody ? TakeoverStart::kNobody : TakeoverStart::kFailed;
  // An abstract name has no permissions: whoever bound it first holds it.
  // Nothing is sent before we know it is a process we may trust with every
  // connection (and that may be trusted with ours).
  TakeoverPeer listener;
  if (!takeover_peer_of(channel.get(), &listener, error)) return TakeoverStart::kFailed;
  if (!takeover_uid_allowed(listener.uid)) {
    *error = "the takeover channel is held by " + listener.describe() +
             ", not this user's or root's: nothing was sent to it; stop that process (docs/operations.md, "
             "\"Takeover\")";
    return TakeoverStart::kFailed;
  }
  std::vector<uint8_t> hello(12);
  uint32_t pid = static_cast<uint32_t>(getpid());
  for (int i = 0; i < 4; ++i) {
    hello[i] = static_cast<uint8_t>(kTakeoverVersion >> (8 * i));
    hello[4 + i] = static_cast<uint8_t>(pid >> (8 * i));
    hello[8 + i] = static_cast<uint8_t>((kTakeoverCommit | kTakeoverLocalLegs) >> (8 * i));
  }
  if (!send_takeover_message(channel.get(), TakeoverMessage::kHello, hello, {}, error)) return TakeoverStart::kFailed;
  log::info("takeover_started").kv("address", takeover_address(*config_)).kv("listener", listener.describe());
  auto fds = std::make_shared<std::vector<UniqueFd>>();
  ProcessImage image;
  bool first = true;
  auto refuse = [&](const std::string& why) {
    *error = why;
    std::string ignored;
    send_takeover_message(channel.get(), TakeoverMessage::kRefused, text_payload(why), {}, &ignored);
    return TakeoverStart::kFailed;
  };
  for (;; first = false) {
    TakeoverMessageIn m;
    if (!receive_takeover_message(channel.get(), &m, error)) return TakeoverStart::kFailed;
    if (m.type == TakeoverMessage::kWelcome) {
      if (!first) return refuse("WELCOME after other messages");
      // The kernel vouches for these: the process speaking, not whoever
      // created the listening socket (which moves from process to process).
      if (!m.has_sender || !takeover_uid_allowed(m.sender.uid) || m.sender.pid <= 0 || m.sender.pid == getpid())
        return refuse("the process answering is " + (m.has_sender ? m.sender.describe() : "unknown") +
                      ": not this user's or root's rdmagw");
      if (m.fds.size() != 1 || !is_takeover_listener(m.fds[0].get(), *config_, error))
        return refuse("WELCOME did not bring the channel's listening socket: " + *error);
      takeover_listener_ = std::move(m.fds[0]);
      takeover_peer_ = m.sender;
      committing_ = true;
      continue;
    }
    if (m.type == TakeoverMessage::kSockets) {
      for (auto& fd : m.fds) fds->push_back(std::move(fd));
      continue;
    }
    if (m.type == TakeoverMessage::kRefused) {
      *error = "the running rdmagw refused: " + std::string(m.payload.begin(), m.payload.end());
      return TakeoverStart::kFailed;
    }
    if (m.type == TakeoverMessage::kLocalLegs) {
      // Adopted with the local legs (attach_local_legs); checked there,
      // against this build's programs and this configuration.
      if (inherited_legs_ || m.payload.size() < 4) return refuse("a malformed or second LOCAL_LEGS");
      local::LocalRedirectHandover legs;
      for (int i = 0; i < 4; ++i) legs.layout |= uint32_t{m.payload[static_cast<size_t>(i)]} << (8 * i);
      legs.cgroup.assign(m.payload.begin() + 4, m.payload.end());
      legs.fds = std::move(m.fds);
      inherited_legs_ = std::move(legs);
      continue;
    }
    if (m.type != TakeoverMessage::kImage)
      return refuse("unexpected message " + std::to_string(static_cast<uint32_t>(m.type)));
    if (!decode_process_image(m.payload.data(), m.payload.size(), &image, error))
      return refuse("its image is malformed: " + *error);
    if (image.fd_count != fds->size())
      return refuse("its image names " + std::to_string(image.fd_count) + " sockets, " + std::to_string(fds->size()) +
                    " came");
    if (!check_inherited_sockets(image, *fds, *config_, error))
      return refuse("its sockets do not match its image: " + *error);
    // A leg's read counter is a slot of the maps that come with LOCAL_LEGS.
    for (const WorkerImage& w : image.workers)
      for (const auto& stream : w.connections.streams)
        if (stream.leg.present && !inherited_legs_) return refuse("its image has redirected legs but no maps came");
    break;
  }
  if (!committing_) {
    takeover_peer_ = listener;
    log::warn("takeover_unconfirmed")
        .kv("old", listener.describe())
        .kv("reason",
            "the running rdmagw is an older version: it cannot confirm that it let go, and keeps the "
            "channel's socket");
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

void Runtime::abandon_takeover(const std::string& why) {
  // The old process carries on with these: closing ours must not unlink a
  // unix socket's path it still serves.
  for (const auto& l : inherited_listeners_) l->fds->hand_over();
  inherited_listeners_.clear();
  if (!takeover_channel_.valid()) return;
  std::string ignored;
  send_takeover_message(takeover_channel_.get(), TakeoverMessage::kRefused, text_payload(why), {}, &ignored);
  takeover_channel_.reset();
}

bool Runtime::commit_takeover(std::string* error) {
  if (!send_takeover_message(takeover_channel_.get(), TakeoverMessage::kAdopted, {}, {}, error)) {
    *error = "could not tell the old process to let go: " + *error;
    abandon_takeover(*error);
    return false;
  }
  if (committing_) {
    // Only its answer makes the sockets ours: without it, the old process
    // gave up waiting and carries on, and so must we not serve.
    TakeoverMessageIn answer;
    std::string why;
    bool received = receive_takeover_message(takeover_channel_.get(), &answer, &why);
    if (!received || answer.type != TakeoverMessage::kReleased) {
      if (received)
        why = answer.type == TakeoverMessage::kRefused
                  ? std::string(answer.payload.begin(), answer.payload.end())
                  : "message " + std::to_string(static_cast<uint32_t>(answer.type));
      *error = "the old process did not let go (" + why + "); it carries on";
      abandon_takeover(*error);
      return false;
    }
  }
  takeover_channel_.reset();
  inherited_listeners_.clear();  // those the configuration no longer has close here
  log::info("takeover_done").kv("old", takeover_peer_.describe());
  return true;
}

void Runtime::serve_takeovers() {
  // From the process we took over, if it was one that hands it on: the name
  // was never free in between.
  UniqueFd listening = std::move(takeover_listener_);
  auto next_try = std::chrono::steady_clock::now();
  auto busy_since = next_try;
  pid_t reported = 0;
  while (!takeover_stop_) {
    if (!listening.valid()) {
      if (std::chrono::steady_clock::now() < next_try) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      std::string error;
      bool in_use = false;
      listening = listen_for_takeover(*config(), &in_use, &error);
      if (!listening.valid()) {
        // Held by the process we took over from until it exits, or by
        // someone else: that one is reported, since a --takeover would
        // then fail (it refuses to talk to another user's process).
        next_try = std::chrono::steady_clock::now() + std::chrono::milliseconds(reported ? 1000 : 100);
        if (in_use) report_taken_channel(busy_since, &reported);
        continue;
      }
      log::Line(reported ? log::Level::kWarn : log::Level::kDebug, "takeover_listening")
          .kv("address", takeover_address(*config()));
      reported = 0;
    }
    pollfd p{listening.get(), POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    UniqueFd peer(accept4(listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!peer.valid()) continue;
    hand_over(std::move(peer), listening.get());
    if (taken_over_) return;
  }
}

void Runtime::report_taken_channel(std::chrono::steady_clock::time_point busy_since, pid_t* reported) {
  bool nobody = false;
  std::string error;
  UniqueFd probe = connect_for_takeover(*config(), &nobody, &error);
  TakeoverPeer holder;
  if (!probe.valid() || !takeover_peer_of(probe.get(), &holder, &error)) return;
  bool ours = takeover_uid_allowed(holder.uid);
  // Our predecessor lets go as it exits: only a long wait is worth a line.
  if (ours && std::chrono::steady_clock::now() - busy_since < std::chrono::seconds(10)) return;
  if (holder.pid == *reported) return;
  *reported = holder.pid;
  log::Line(ours ? log::Level::kWarn : log::Level::kError, "takeover_channel_taken")
      .kv("address", takeover_address(*config()))
      .kv("holder", holder.describe())
      .kv("reason", ours ? "another process of this user holds it"
                         : "another user's process holds it: `rdmagw --takeover` will refuse to talk to it")
      .kv("next", "tried again every second; takeover_listening once it is ours");
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

void Runtime::hand_over(UniqueFd peer, int listening) {
  std::string error;
  TakeoverPeer taker;
  std::string who = "unknown process";
  auto refuse = [&](const std::string& why) {
    log::warn("takeover_refused").kv("by", who).kv("reason", why);
    std::string ignored;
    send_takeover_message(peer.get(), TakeoverMessage::kRefused, text_payload(why), {}, &ignored);
  };
  if (!takeover_peer_of(peer.get(), &taker, &error)) return refuse(error);
  who = taker.describe();
  pid_t pid = taker.pid;
  if (!takeover_uid_allowed(taker.uid)) return refuse("another user may not take over this rdmagw");
  TakeoverMessageIn hello;
  if (!receive_takeover_message(peer.get(), &hello, &error)) return refuse(error);
  if (hello.type != TakeoverMessage::kHello || hello.payload.size() < 4 || hello.payload[0] != kTakeoverVersion)
    return refuse("not a takeover request this version understands");
  uint32_t features = 0;
  for (size_t i = 0; i < 4 && 8 + i < hello.payload.size(); ++i) features |= uint32_t{hello.payload[8 + i]} << (8 * i);
  bool commit = (features & kTakeoverCommit) != 0;
  std::lock_guard reloading(reload_mu_);
  if (draining_ || !running_) return refuse("this rdmagw is draining or still starting");
  // Redirected legs live in this process's maps: they move with the
  // connections, to a process that knows how to adopt them.
  if (local_redirect_ && !(features & kTakeoverLocalLegs))
    return refuse(
        "this rdmagw redirects its local legs (local_legs.redirect) and the new process cannot adopt them (an "
        "older rdmagw): restart it instead");
  log::info("takeover_requested").kv("by", who).kv("streams", live_streams());
  // Who we are, vouched for by the kernel, and the channel itself, so that
  // its name is never unbound between us and the new process.
  if (commit && !send_takeover_message(peer.get(), TakeoverMessage::kWelcome, {}, {listening}, &error, true))
    return refuse(error);
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
  if (local_redirect_) {
    std::vector<uint8_t> legs(4);
    uint32_t layout = local::LocalRedirect::layout();
    for (int i = 0; i < 4; ++i) legs[static_cast<size_t>(i)] = static_cast<uint8_t>(layout >> (8 * i));
    const std::string& cgroup = local_legs_.cgroup;  // where they are attached (`pod` found at start)
    legs.insert(legs.end(), cgroup.begin(), cgroup.end());
    if (!send_takeover_message(peer.get(), TakeoverMessage::kLocalLegs, legs, local_redirect_->handover_fds(), &error))
      return thaw_and_refuse(error);
  }
  for (size_t i = 0; i < fds.size(); i += kMaxFdsPerMessage) {
    std::vector<int> part(fds.begin() + static_cast<long>(i),
                          fds.begin() + static_cast<long>(std::min(fds.size(), i + kMaxFdsPerMessage)));
    if (!send_takeover_message(peer.get(), TakeoverMessage::kSockets, {}, part, &error)) return thaw_and_refuse(error);
  }
  if (!send_takeover_message(peer.get(), TakeoverMessage::kImage, payload, {}, &error)) return thaw_and_refuse(error);
  // The new process only opens what its configuration adds before it
  // answers; meanwhile nothing here accepts or carries a byte, so the wait
  // is short. A late ADOPTED finds the channel closed and gets no RELEASED.
  set_receive_timeout(peer.get(), adopted_timeout_ms(config()->tunnel.resume_timeout_ms));
  TakeoverMessageIn answer;
  if (!receive_takeover_message(peer.get(), &answer, &error)) return thaw_and_refuse(error);
  if (answer.type != TakeoverMessage::kAdopted)
    return thaw_and_refuse("the new process refused: " + std::string(answer.payload.begin(), answer.payload.end()));
  // From here on the new process serves, once it reads this; a failure to
  // send it means it never will, and we carry on.
  if (commit && !send_takeover_message(peer.get(), TakeoverMessage::kReleased, {}, {}, &error))
    return thaw_and_refuse("could not confirm to the new process: " + error);

  // Everything runs in the new process now: ours only closes. Our streams'
  // legs, ended here, leave their flows in the maps the new process uses.
  {
    std::lock_guard lock(mu_);
    for (const auto& l : listeners_) l->fds->hand_over();
    ready_ = false;
  }
  if (local_redirect_) local_redirect_->hand_over();
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
      .kv("pause_ms",
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
  on_every_worker([](Worker& w) { w.finish_takeover(); }, kQuietTimeout, &error);
}

}  // namespace rdmagw
