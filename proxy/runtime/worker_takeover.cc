// SPDX-License-Identifier: Apache-2.0
// A worker's part in a takeover (docs/operations.md, "Takeover"). In the old
// process: stop accepting, freeze, wait until no connection has I/O in
// flight, write everything down, then let go without touching a socket. In
// the new one: rebuild the sessions (suspended; they resume with the peers
// like after a transport loss) and the connections on the sockets that came
// over.
#include <sys/socket.h>

#include "common/log.h"
#include "common/socket_options.h"
#include "proxy/local/direct_pipe.h"
#include "proxy/local/local_stream.h"
#include "proxy/runtime/worker.h"

namespace rdmagw {

void Worker::freeze_for_takeover() {
  if (frozen_) return;
  frozen_ = true;
  for (auto& l : listeners_) l->acceptor->hand_over();
  // Inbound tunnels wait in the backlog for the new process; RDMA CM's port
  // is given up at once so that the new process can listen on it.
  for (auto& t : tunnel_listeners_) t->stop();
  tunnel_listeners_.clear();
  links_->for_each([](tunnel::PeerLink& link) { link.freeze(); });
  inbound_->for_each([](tunnel::Session& s) {
    if (!s.freeze())
      s.close(tunnel::SessionEnd::kLocalClose, "takeover: a session without resumption cannot move",
              tunnel::CloseMode::kAbort);
  });
  for (local::LocalConnection* c = host_->first; c; c = c->next_in_host()) c->freeze();
}

bool Worker::export_for_takeover(WorkerImage* out) {
  // Connections a late accept made since freeze too; then wait for quiet.
  for (local::LocalConnection* c = host_->first; c; c = c->next_in_host()) c->freeze();
  for (const auto& l : listeners_)
    if (l->acceptor->ops_in_flight() > 0) return false;
  for (const local::LocalConnection* c = host_->first; c; c = c->next_in_host())
    if (!c->ending() && !c->quiet()) return false;
  out->sessions.clear();
  out->connections = {};
  local::SessionIndex index;
  auto add = [&](tunnel::Session& s) {
    if (!s.frozen()) return;
    s.flush();  // events of this batch reach their streams first
    index[&s] = static_cast<int32_t>(out->sessions.size());
    out->sessions.emplace_back();
    s.export_image(&out->sessions.back());
  };
  links_->for_each([&](tunnel::PeerLink& link) {
    for (tunnel::Session* s : link.frozen_sessions()) add(*s);
  });
  inbound_->for_each(add);
  for (const local::LocalConnection* c = host_->first; c; c = c->next_in_host())
    if (!c->ending()) c->export_image(&out->connections, index);
  return true;
}

void Worker::thaw_after_takeover() {
  if (!frozen_) return;
  frozen_ = false;
  for (auto& l : listeners_) {
    l->acceptor =
        make_io<Acceptor>(loop_, l->socket->fds->fd_for(index_), l->socket->config.name,
                          [this, raw = l.get()](UniqueFd client) { on_local_accept(*raw, std::move(client)); });
    l->acceptor->start();
  }
  std::string error;
  if (!make_tunnel_listeners(&error)) log::error("takeover_thaw_failed").kv("reason", error);
  for (auto& t : tunnel_listeners_) t->start(this);
  links_->for_each([](tunnel::PeerLink& link) { link.thaw(); });
  inbound_->for_each([](tunnel::Session& s) { s.thaw(); });
  for (local::LocalConnection* c = host_->first; c; c = c->next_in_host()) c->thaw();
}

void Worker::finish_takeover() {
  for (local::LocalConnection* c = host_->first; c; c = c->next_in_host()) c->forget();
  // The sessions' streams have left them: they close with nothing to reset.
  close_everything("taken over by a new process", tunnel::CloseMode::kAbort);
  listeners_.clear();
  loop_.stop();
}

UniqueFd Worker::take_inherited(uint32_t index) {
  if (!inherited_fds_ || index >= inherited_fds_->size()) return {};
  return std::move((*inherited_fds_)[index]);
}

void Worker::import_image(const WorkerImage& image) {
  std::vector<tunnel::Session*> sessions;
  for (const tunnel::SessionImage& s : image.sessions) {
    tunnel::Session* session = nullptr;
    // The peer may send this session frames as large as it announced; a
    // smaller tunnel.buffer_size now could not take them.
    uint32_t buffer_size = session_settings_.tunnel->buffer_size;
    uint32_t announced = tunnel::announced_max_data(s, *session_settings_.tunnel);
    if (announced > buffer_size) {
      log::warn("takeover_session_dropped")
          .kv("peer", s.dialer ? s.peer_label : s.peer_node)
          .kv("reason", "the session announced frames of up to " + std::to_string(announced) +
                            " bytes; tunnel.buffer_size is " + std::to_string(buffer_size) +
                            " now (lower it only with a restart)");
      sessions.push_back(nullptr);
      continue;
    }
    if (s.dialer) {
      if (tunnel::PeerLink* link = links_->find_or_discover(s.peer_label)) session = link->adopt(s);
    } else {
      session = inbound_->adopt_image(s);
    }
    if (!session)
      log::warn("takeover_session_dropped")
          .kv("peer", s.dialer ? s.peer_label : s.peer_node)
          .kv("reason", s.dialer ? "the peer is no longer configured, or out of buffers" : "out of buffers");
    sessions.push_back(session);
  }
  for (const local::LocalStreamImage& s : image.connections.streams) {
    UniqueFd fd = take_inherited(s.fd);
    tunnel::Session* session = s.session >= 0 ? sessions[static_cast<size_t>(s.session)] : nullptr;
    // The far side of a stream: its target must be one this configuration
    // allows, as an OPEN's would (an image is checked like a peer's frames).
    std::string why;
    auto target = s.target_side ? parse_endpoint(s.target, &why) : std::nullopt;
    if (s.target_side && fd.valid() && (!target || !config_->target_listed(*target, targets_->facts()))) {
      metrics_.failed(metrics::StreamFailure::kNotAllowed);
      log::warn("stream_reset")
          .kv("target", s.target)
          .kv("peer", s.peer)
          .kv("reason", "takeover: its target is not in targets");
      set_abortive_close(fd.get());
      if (session) session->reset_unattached(s.tunnel.id, tunnel::ResetCode::kNotAllowed);
      continue;
    }
    if (!fd.valid() || (s.session >= 0 && !session)) {
      // Its session did not come over: the application sees a reset (the
      // socket has SO_LINGER 0 since it was accepted), never a clean close.
      metrics_.failed(metrics::StreamFailure::kPeerGone);
      log::warn("stream_reset")
          .kv("listener", s.listener)
          .kv("peer", s.peer)
          .kv("reason", "takeover: its session could not move");
      if (fd.valid()) set_abortive_close(fd.get());
      if (session) session->reset_unattached(s.tunnel.id, tunnel::ResetCode::kPeerGone);
      continue;
    }
    metrics::ListenerMetrics* counters = s.listener.empty() ? nullptr : &metrics_.listener(s.listener);
    local::LocalStream* stream = local::LocalStream::restore(*host_, std::move(fd), s, session, counters);
    if (stream && !s.listener.empty()) stream->follow(adopted_terms(s.listener));
    if (stream && !stream->opened()) {
      if (tunnel::PeerLink* link = links_->find_or_discover(stream->peer()))
        link->submit(stream);
      else
        stream->abort(tunnel::ResetCode::kPeerGone, "takeover: its peer is no longer configured");
    }
  }
  for (size_t i = 0; i < sessions.size(); ++i)
    if (sessions[i]) sessions[i]->restore_blocked(image.sessions[i].blocked);
  for (const local::PipeImage& p : image.connections.pipes) {
    UniqueFd client = take_inherited(p.client_fd);
    UniqueFd server = take_inherited(p.server_fd);
    if (!client.valid() || !server.valid()) continue;
    metrics::ListenerMetrics* counters = p.listener.empty() ? nullptr : &metrics_.listener(p.listener);
    local::DirectPipe::restore(*host_, std::move(client), std::move(server), p, counters,
                               p.listener.empty() ? local::ListenerTerms{} : adopted_terms(p.listener));
  }
  log::info("takeover_adopted")
      .kv("sessions", image.sessions.size())
      .kv("streams", image.connections.streams.size())
      .kv("passthrough", image.connections.pipes.size());
}

}  // namespace rdmagw
