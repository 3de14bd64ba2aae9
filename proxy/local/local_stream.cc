// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/local_stream.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "common/log.h"
#include "common/socket_options.h"
#include "common/splice_pipe.h"
#include "proxy/local/access_log.h"
#include "proxy/local/direct_pipe.h"
#include "proxy/local/proxy_header.h"

namespace rdmagw::local {

using tunnel::kBufferHeadroom;
using tunnel::ResetCode;

namespace {
metrics::StreamFailure failure_of(ResetCode code) {
  switch (code) {
    case ResetCode::kCancel:
      return metrics::StreamFailure::kReset;
    case ResetCode::kRefused:
      return metrics::StreamFailure::kTargetRefused;
    case ResetCode::kConnectFailed:
      return metrics::StreamFailure::kTargetUnreachable;
    case ResetCode::kNotAllowed:
      return metrics::StreamFailure::kNotAllowed;
    case ResetCode::kPeerGone:
      return metrics::StreamFailure::kPeerGone;
    case ResetCode::kProtocol:
      return metrics::StreamFailure::kProtocol;
    case ResetCode::kResource:
      return metrics::StreamFailure::kResource;
    case ResetCode::kShutdown:
      return metrics::StreamFailure::kShutdown;
  }
  return metrics::StreamFailure::kProtocol;
}
// Shortens `iov` (n entries) to at most `limit` bytes, at least one entry
// kept; returns how many entries remain.
size_t limit_iovecs(iovec* iov, size_t n, size_t limit) {
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (total + iov[i].iov_len >= limit) {
      iov[i].iov_len = limit - total;
      return i + 1;
    }
    total += iov[i].iov_len;
  }
  return n;
}
}  // namespace

LocalStream::LocalStream(StreamHost& host, UniqueFd fd)
    : LocalConnection(host), fd_(std::move(fd)), to_socket_(&host.pool, /*keep_last_buffer=*/false) {
  set_abortive_close(fd_.get());
  recv_op_ = IoOp::bind<&LocalStream::on_recv>(this);
  send_op_ = IoOp::bind<&LocalStream::on_send>(this);
  error_poll_op_ = IoOp::bind<&LocalStream::on_error_poll>(this);
  started_ = Clock::now();
  started_wall_ = std::chrono::system_clock::now();
}

LocalStream::~LocalStream() {
  if (parked_buffer_) host_.pool.release(parked_buffer_);
  take_terms();  // its place in the listener's count, given back before it stops counting as active
  if (listener_counters_) listener_counters_->active.sub();
  if (target_side_) host_.metrics.target_streams_active.sub();
}

LocalStream* LocalStream::from_client(StreamHost& host, UniqueFd fd, std::string listener,
                                      metrics::ListenerMetrics* counters, std::string peer, std::string target,
                                      std::string destination, EndpointLease lease, ListenerTerms terms) {
  set_nodelay(fd.get());
  auto* s = new LocalStream(host, std::move(fd));
  s->count_towards(std::move(lease));
  s->follow(std::move(terms));
  s->origin_.connection = next_connection_id().bytes;
  sockaddr_storage client{};
  socklen_t client_length = sizeof(client);
  bool client_known = getpeername(s->fd_.get(), reinterpret_cast<sockaddr*>(&client), &client_length) == 0;
  if (client_known) s->origin_.client = origin_address(reinterpret_cast<sockaddr*>(&client), client_length);
  std::string ignored;
  if (!destination.empty())
    if (std::optional<Endpoint> meant = parse_host_port(destination, &ignored))
      s->origin_.destination = origin_address(reinterpret_cast<const sockaddr*>(&meant->addr), meant->addr_len);
  if (host.access_log && host.access_log->enabled()) {
    s->client_ =
        client_known ? sockaddr_to_string(reinterpret_cast<sockaddr*>(&client), client_length) : std::string("unknown");
    s->destination_ = std::move(destination);
  }
  s->listener_ = std::move(listener);
  s->peer_ = std::move(peer);
  s->target_ = std::move(target);
  s->listener_counters_ = counters;
  if (counters) {
    counters->accepted.add();
    counters->active.add();
  }
  s->admit_to_redirect();
  return s;
}

LocalStream* LocalStream::to_target(StreamHost& host, const tunnel::Session& session, uint32_t id,
                                    const Endpoint& target, const tunnel::StreamOrigin* origin, bool proxy_header,
                                    ResetCode* refuse) {
  int fd = ::socket(target.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    log::warn("stream_refused")
        .kv("peer", session.peer_node())
        .kv("stream", id)
        .kv("connection", origin ? connection_of(*origin).text() : std::string())
        .kv("target", target.to_string())
        .kv("reason", "socket-failed")
        .kv("error", strerror(errno));
    *refuse = ResetCode::kResource;
    return nullptr;
  }
  auto* s = new LocalStream(host, UniqueFd(fd));
  s->target_side_ = true;
  s->phase_ = Phase::kConnecting;
  host.metrics.target_streams_active.add();
  host.metrics.streams_opened_inbound.add();
  s->peer_ = session.peer_node();
  s->target_ = target.to_string();
  if (origin) s->origin_ = *origin;
  if (proxy_header)
    s->proxy_header_ = std::make_unique<std::string>(
        proxy_v2_header(origin, reinterpret_cast<const sockaddr*>(&target.addr), target.addr_len));
  if (host.access_log && host.access_log->enabled()) {
    s->client_ = origin_address_text(s->origin_.client);
    s->destination_ = origin_address_text(s->origin_.destination);
    s->remote_ = session.remote_address();
    s->transport_ = tunnel::transport_kind_name(session.transport_kind());
  }
  if (host.redirector) {
    // Before the connect: the programs pick a connection up when it is
    // established, by its port. A port they cannot hold leaves it on TCP.
    std::string ignored;
    if (uint16_t port = endpoint_port(target); port != 0 && is_loopback(target))
      host.redirector->redirect.add_port(port, &ignored);
  }
  s->connector().start(host.loop, fd, target.addr, target.addr_len, host.connect_timeout_ms);
  return s;
}

bool LocalStream::describe(StreamInfo* out) const {
  if (closing_) return false;  // ended; only waiting for its last completions
  out->worker = host_.worker;
  out->side = target_side_ ? "target" : "client";
  out->listener = listener_;
  out->peer = peer_;
  out->target = target_;
  out->stream_id = stream_id();
  out->connection = connection();
  out->client = origin_address_text(origin_.client);
  out->age_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count());
  out->bytes_from_app = bytes_up_;
  out->bytes_to_app = bytes_down_;
  if (phase_ == Phase::kConnecting)
    out->state = "connecting";
  else if (phase_ == Phase::kWaiting)
    out->state = "waiting";
  else if (read_closed_ || fin_received())
    out->state = "half-closed";
  else
    out->state = "open";
  out->queued_to_app = to_socket_.size();
  out->send_credit = send_credit();
  if (phase_ == Phase::kConnecting)
    out->waiting_for = "target-connect";
  else if (phase_ == Phase::kWaiting)
    out->waiting_for = "session";
  else if (parked_buffer_ || waits_for_session_credit())
    out->waiting_for = "session-credit";
  else if (waits_for_window())
    out->waiting_for = "peer-window";
  else if (sending_)
    out->waiting_for = "app-read";
  else if (recv_posted_)
    out->waiting_for = "app-data";
  if (leg_) out->local_leg = leg_->sending_by_tcp() ? "redirected-sending-by-tcp" : "redirected";
  return true;
}

void LocalStream::admit_to_redirect() {
  if (host_.redirector) leg_ = RedirectedLeg::admit(*host_.redirector, fd_.get());
}

size_t LocalStream::send_limit() { return leg_ ? leg_->before_send(fd_.get()) : SIZE_MAX; }

void LocalStream::note_sent(size_t n) {
  if (leg_) leg_->sent(n);
}

void LocalStream::add_bytes_from_app(uint64_t n) {
  if (leg_) leg_->read(n);
  bytes_up_ += n;
  if (listener_counters_) listener_counters_->bytes_received.add(n);
}

void LocalStream::add_bytes_to_app(uint64_t n) {
  if (bytes_down_ == 0 && n > 0) first_byte_us_ = since_start_us();
  bytes_down_ += n;
  if (listener_counters_) listener_counters_->bytes_sent.add(n);
}

// --- the one failure path ------------------------------------------------------

void LocalStream::fail(std::string_view event, std::string_view by, metrics::StreamFailure why, ResetCode to_peer,
                       std::string_view reason, std::string_view error) {
  if (closing_) return;
  note_transport();
  ended_by_ = by;
  if (host_.access_log && host_.access_log->enabled())
    end_reason_ = error.empty() ? std::string(reason) : std::string(reason) + ": " + std::string(error);
  auto line = why == metrics::StreamFailure::kReset ? log::info(event) : log::warn(event);
  line.kv("listener", listener_)
      .kv("peer", peer_)
      .kv("stream", stream_id())
      .kv("connection", connection())
      .kv("target", target_)
      .kv("reason", reason);
  if (!error.empty()) line.kv("error", error);
  if (!failure_counted_) {
    failure_counted_ = true;
    host_.metrics.failed(why);
  }
  if (session()) session()->reset_stream(*this, to_peer);
  terminate(Ending::kReset);
}

void LocalStream::fail_local(int error) {
  // The application reset its connection (or its socket broke): abort the
  // whole stream, and tell the peer.
  fail("stream_reset", app_side(), metrics::StreamFailure::kReset, ResetCode::kCancel, "local-reset", strerror(error));
}

void LocalStream::end_idle() {
  if (listener_counters_) listener_counters_->idle_closed.add();
  fail("stream_reset", "rdmagw", metrics::StreamFailure::kIdle, ResetCode::kCancel, "idle-timeout");
}

void LocalStream::reset_now(std::string_view reason) {
  fail("stream_reset", "rdmagw", metrics::StreamFailure::kShutdown, ResetCode::kShutdown, reason);
}

// --- connecting to the target (far side) --------------------------------------

TimedConnect& LocalStream::connector() {
  if (!connect_) {
    connect_ = std::make_unique<TimedConnect>();
    connect_->bind<&LocalStream::on_target_connected>(this);
  }
  return *connect_;
}

void LocalStream::on_target_connected(int error) {
  phase_ = Phase::kOpen;
  if (closing_) return;
  connect_us_ = since_start_us();
  if (error != 0) {
    bool refused = error == ECONNREFUSED;
    fail("stream_refused", "target",
         refused ? metrics::StreamFailure::kTargetRefused : metrics::StreamFailure::kTargetUnreachable,
         refused ? ResetCode::kRefused : ResetCode::kConnectFailed, "connect-failed", strerror(error));
    return;
  }
  set_nodelay(fd_.get());
  admit_to_redirect();
  if (proxy_header_) {
    // Before any byte of the stream; a socket just connected takes it whole.
    ssize_t n = ::send(fd_.get(), proxy_header_->data(), proxy_header_->size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(proxy_header_->size())) {
      fail("stream_refused", "target", metrics::StreamFailure::kTargetUnreachable, ResetCode::kConnectFailed,
           "proxy-header-failed", n < 0 ? strerror(errno) : "a short send");
      return;
    }
    note_sent(static_cast<size_t>(n));
    proxy_header_.reset();
  }
  host_.metrics.target_connect.observe_us(static_cast<uint64_t>(connect_us_));
  log::debug("stream_connected")
      .kv("peer", peer_)
      .kv("stream", stream_id())
      .kv("connection", connection())
      .kv("target", target_);
  start_reading();
  pump_send();
  maybe_shutdown_write();
}

// --- dialing side: waiting for and opening on a session -----------------------

void LocalStream::attach(tunnel::Session& session) {
  if (closing_) return;
  uint8_t* buffer = host_.pool.acquire();
  if (!buffer) {
    fail("stream_failed", "rdmagw", metrics::StreamFailure::kResource, ResetCode::kResource, "out of buffers");
    return;
  }
  // 0-RTT: if the application already wrote, its first bytes ride in the OPEN.
  uint32_t credit = std::min(session.open_credit(), host_.payload_size);
  ssize_t n = 0;
  bool eof = false;
  if (credit > 0) {
    n = ::recv(fd_.get(), buffer + kBufferHeadroom, credit, MSG_DONTWAIT);
    if (n == 0) eof = true;
    if (n < 0) n = 0;  // nothing yet (EAGAIN), or an error the first recv will report
  }
  if (n == 0) {
    // Nothing to carry: the OPEN goes into the session's shared frame
    // buffer instead of holding a whole buffer of its own while it waits to
    // leave (a burst of new connections would touch one per stream).
    host_.pool.release(buffer);
    buffer = nullptr;
  }
  if (!session.peer_node().empty()) peer_ = session.peer_node();
  if (!session.open_stream(*this, target_, buffer, static_cast<uint32_t>(n), &origin_)) {
    fail("stream_failed", "rdmagw", metrics::StreamFailure::kResource, ResetCode::kResource,
         "the session could not open it");
    return;
  }
  phase_ = Phase::kOpen;
  host_.metrics.streams_opened_outbound.add();
  session_wait_us_ = since_start_us();
  host_.metrics.stream_open.observe_us(static_cast<uint64_t>(session_wait_us_));
  add_bytes_from_app(static_cast<uint64_t>(n));
  log::debug("stream_open")
      .kv("listener", listener_)
      .kv("peer", peer_)
      .kv("stream", stream_id())
      .kv("connection", connection())
      .kv("target", target_);
  if (eof) {
    read_closed_ = true;
    session.send_fin(*this);
    maybe_done();
    watch_for_errors();  // nothing more is read: a reset would go unseen
    return;
  }
  start_reading();
}

void LocalStream::reach_directly_if_refused(const sockaddr_storage& address, socklen_t length) {
  direct_address_ = address;
  direct_length_ = length;
}

bool LocalStream::divert_on_refusal() {
  // Only while it waits: nothing was read from the application yet (the
  // first bytes are read by attach), so the direct connection loses none.
  if (direct_length_ == 0 || closing_ || frozen_ || phase_ != Phase::kWaiting || !fd_.valid()) return false;
  closing_ = true;  // ends here without a trace of its own: the pipe logs the connection
  DirectPipe::start(host_, std::move(fd_), direct_address_, direct_length_, listener_, listener_counters_, take_lease(),
                    take_terms());
  retire();
  return true;
}

void LocalStream::abort(ResetCode code, std::string_view reason) {
  // kPeerGone here means no session came up for the stream in time.
  fail("stream_failed", "tunnel", code == ResetCode::kPeerGone ? metrics::StreamFailure::kNoSession : failure_of(code),
       code, reason);
}

// --- socket -> tunnel --------------------------------------------------------

void LocalStream::start_reading() {
  if (frozen_ || recv_posted_ || read_closed_ || closing_ || phase_ == Phase::kConnecting || parked_buffer_ ||
      !session())
    return;
  // Only stream credit is held while the receive waits: an idle connection
  // must not pin any of the session's shared budget, nor any buffer.
  uint32_t credit = session()->take_stream_credit(*this, host_.payload_size);
  if (credit == 0) {  // on_send_credit() resumes us
    watch_for_errors();
    return;
  }
  receive_.post(host_, &recv_op_, fd_.get(), credit);
  recv_posted_ = true;
}

void LocalStream::on_recv(int res, uint32_t flags) {
  recv_posted_ = false;
  bool live = !closing_ && session();
  uint8_t* buffer = nullptr;
  res = receive_.finish(host_, fd_.get(), res, flags, live, &buffer);
  if (!live) {
    if (buffer) host_.pool.release(buffer);
    return;
  }
  uint32_t credit = receive_.length();  // held while the receive was posted
  if (res > 0) {
    session()->refund_stream_credit(*this, credit - static_cast<uint32_t>(res));
    forward(buffer, static_cast<uint32_t>(res));
    return;
  }
  session()->refund_stream_credit(*this, credit);
  if (buffer) host_.pool.release(buffer);
  if (frozen_ && res == -ECANCELED) return;  // a takeover stopped it
  if (res == 0) {
    read_closed_ = true;
    session()->send_fin(*this);
    maybe_done();
    watch_for_errors();  // nothing more is read: a reset would go unseen
  } else if (res == -EINTR || res == -EAGAIN || res == -ENOBUFS) {
    start_reading();
  } else if (res == -ENOMEM) {
    fail("stream_reset", "rdmagw", metrics::StreamFailure::kResource, ResetCode::kResource, "out of buffers");
  } else {
    fail_local(-res);
  }
}

void LocalStream::forward(uint8_t* buffer, uint32_t len) {
  if (!session()->take_session_credit(*this, len)) {
    parked_buffer_ = buffer;
    parked_len_ = len;
    watch_for_errors();
    return;
  }
  session()->send_data(*this, buffer, len);
  add_bytes_from_app(len);
  start_reading();
}

// --- tunnel -> socket --------------------------------------------------------

tunnel::Stream::Delivery LocalStream::on_peer_data(std::span<const iovec> pieces) {
  Delivery d;
  assert(!closing_ && "an ending stream is detached: no data reaches it");
  // Fast path: nothing queued ahead of these bytes, so hand them to the
  // socket straight from the tunnel's receive buffer, all of this batch's
  // pieces in one sendmsg. This skips the copy into to_socket_ and an
  // io_uring round trip; whatever the socket does not take now is queued as
  // usual. Errors are left to the queued send to report.
  size_t skip = 0;  // bytes of `pieces` already in the socket
  if (!sending_ && phase_ != Phase::kConnecting && to_socket_.empty() && !write_shut_) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(pieces.data());  // sendmsg does not write it
    m.msg_iovlen = std::min<size_t>(pieces.size(), IOV_MAX);
    iovec limited[kMaxIov];
    if (size_t limit = send_limit(); limit != SIZE_MAX) {
      // A redirected leg: this send carries at most `limit` bytes.
      m.msg_iovlen = std::min<size_t>(pieces.size(), kMaxIov);
      std::copy_n(pieces.begin(), m.msg_iovlen, limited);
      m.msg_iov = limited;
      m.msg_iovlen = limit_iovecs(limited, m.msg_iovlen, limit);
    }
    ssize_t n = ::sendmsg(fd_.get(), &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      note_sent(static_cast<size_t>(n));
      add_bytes_to_app(static_cast<uint64_t>(n));
      d.delivered = static_cast<uint32_t>(n);
      skip = static_cast<size_t>(n);
    }
  }
  for (const iovec& piece : pieces) {
    if (skip >= piece.iov_len) {
      skip -= piece.iov_len;
      continue;
    }
    if (!to_socket_.append(static_cast<const uint8_t*>(piece.iov_base) + skip, piece.iov_len - skip)) {
      d.accepted = false;
      return d;
    }
    skip = 0;
  }
  pump_send();
  return d;
}

tunnel::Stream::Delivery LocalStream::on_peer_piped(std::span<const uint8_t> head, int pipe_fd, uint32_t piped) {
  Delivery d;
  assert(!closing_ && "an ending stream is detached: no data reaches it");
  size_t head_sent = 0;
  uint32_t piped_sent = 0;
  // As on_peer_data: with nothing queued ahead, the bytes go to the socket
  // now, the piped ones by splice (they never enter user space). What the
  // socket does not take is queued, read out of the pipe: the pipe must be
  // empty when this returns.
  bool nothing_ahead = !sending_ && phase_ != Phase::kConnecting && to_socket_.empty() && !write_shut_;
  // A redirected leg: these sends carry at most `limit` bytes in all.
  size_t limit = nothing_ahead ? send_limit() : 0;
  if (nothing_ahead && head.size() <= limit) {
    if (!head.empty()) {
      ssize_t n = ::send(fd_.get(), head.data(), head.size(), MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE);
      if (n > 0) head_sent = static_cast<size_t>(n);
    }
    while (head_sent == head.size() && piped_sent < piped && head_sent + piped_sent < limit) {
      size_t want = std::min<size_t>(piped - piped_sent, limit - head_sent - piped_sent);
      ssize_t n = ::splice(pipe_fd, nullptr, fd_.get(), nullptr, want, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n <= 0) break;  // the socket is full (an error is left to the queued send to report)
      piped_sent += static_cast<uint32_t>(n);
    }
    d.delivered = static_cast<uint32_t>(head_sent) + piped_sent;
    if (d.delivered > 0) {
      note_sent(d.delivered);
      add_bytes_to_app(d.delivered);
    }
  }
  if (head_sent < head.size() && !to_socket_.append(head.data() + head_sent, head.size() - head_sent))
    d.accepted = false;
  uint32_t left = piped - piped_sent;
  while (d.accepted && left > 0) {
    uint32_t chunk = std::min<uint32_t>(left, static_cast<uint32_t>(host_.pool.buffer_size()));
    uint8_t* to = to_socket_.append_contiguous(chunk);
    if (!to) {
      d.accepted = false;
      break;
    }
    // The bytes are in the pipe already: a short read cannot happen.
    ssize_t n = ::read(pipe_fd, to, chunk);
    assert(n == static_cast<ssize_t>(chunk) && "the pipe holds every piped byte");
    if (n != static_cast<ssize_t>(chunk)) {
      d.accepted = false;
      break;
    }
    left -= chunk;
  }
  if (!d.accepted) {
    // Refused (no buffers): the session resets the stream; drop the rest.
    SplicePipe::discard(pipe_fd, left);
    return d;
  }
  pump_send();
  return d;
}

void LocalStream::pump_send() {
  if (frozen_ || sending_ || closing_ || phase_ == Phase::kConnecting || to_socket_.empty()) return;
  int n = to_socket_.front_iovecs(iov_, kMaxIov);
  msg_ = {};
  msg_.msg_iov = iov_;
  msg_.msg_iovlen = limit_iovecs(iov_, static_cast<size_t>(n), send_limit());
  io_uring_sqe* s = host_.loop.sqe(&send_op_);
  io_uring_prep_sendmsg(s, fd_.get(), &msg_, MSG_NOSIGNAL);
  sending_ = true;
}

void LocalStream::on_send(int res, uint32_t) {
  sending_ = false;
  if (closing_ || (frozen_ && res == -ECANCELED)) return;
  if (res < 0) {
    if (res == -EINTR || res == -EAGAIN)
      pump_send();
    else
      fail_local(-res);
    return;
  }
  to_socket_.consume(static_cast<size_t>(res));
  note_sent(static_cast<size_t>(res));
  add_bytes_to_app(static_cast<uint64_t>(res));
  if (session()) session()->delivered(*this, static_cast<uint32_t>(res));
  pump_send();
  maybe_shutdown_write();
}

void LocalStream::on_peer_fin() {
  // fin_received() says so already (the session set it while parsing).
  maybe_shutdown_write();
}

void LocalStream::maybe_shutdown_write() {
  if (frozen_ || !peer_fin_settled() || write_shut_ || sending_ || phase_ == Phase::kConnecting || closing_ ||
      !to_socket_.empty())
    return;
  ::shutdown(fd_.get(), SHUT_WR);
  write_shut_ = true;
  maybe_done();
}

// --- the session's word -------------------------------------------------------

void LocalStream::on_peer_reset(ResetCode code) {
  // Detached already: nothing goes back to the peer.
  fail("stream_reset", "peer", failure_of(code), code, tunnel::reset_code_name(code));
}

void LocalStream::on_session_lost(std::string_view reason) {
  // Both FINs crossed: only the bytes queued for our socket remain, and they
  // need no session.
  if (tunnel_done()) {
    maybe_shutdown_write();
    maybe_done();
    return;
  }
  fail("stream_reset", "tunnel", metrics::StreamFailure::kPeerGone, ResetCode::kPeerGone, "peer-gone", reason);
}

void LocalStream::on_send_credit() {
  if (closing_ || !session()) return;
  if (parked_buffer_) {
    uint8_t* buffer = std::exchange(parked_buffer_, nullptr);
    forward(buffer, std::exchange(parked_len_, 0));
    return;
  }
  start_reading();
}

void LocalStream::watch_for_errors() {
  if (frozen_ || error_poll_posted_ || closing_) return;
  io_uring_sqe* s = host_.loop.sqe(&error_poll_op_);
  io_uring_prep_poll_add(s, fd_.get(), POLLERR);  // POLLHUP is always reported too
  error_poll_posted_ = true;
}

void LocalStream::on_error_poll(int res, uint32_t) {
  error_poll_posted_ = false;
  if (closing_ || res < 0 || !(res & POLLERR)) return;
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  fail_local(err ? err : ECONNRESET);
}

// --- the end -------------------------------------------------------------------

void LocalStream::maybe_done() {
  if (!read_closed_ || !write_shut_ || closing_) return;
  // Our FIN could not leave (the session closed under us): the session's
  // end, dispatched later in this batch, resets the stream instead.
  if (session() && !tunnel_done()) return;
  note_transport();
  log::debug("stream_closed")
      .kv("peer", peer_)
      .kv("stream", stream_id())
      .kv("connection", connection())
      .kv("bytes_up", bytes_up_)
      .kv("bytes_down", bytes_down_);
  if (session()) session()->detach(*this);
  terminate(Ending::kClean);
}

void LocalStream::note_transport() {
  if (session()) transport_ = tunnel::transport_kind_name(session()->transport_kind());
}

void LocalStream::write_access_log(Ending how) const {
  if (!host_.access_log || !host_.access_log->enabled()) return;
  AccessRecord r;
  r.direction = target_side_ ? "inbound" : "outbound";
  r.listener = listener_;
  std::string connection_id = connection();
  r.connection = connection_id;
  r.client = client_;
  r.destination = destination_;
  r.remote = remote_;
  r.peer = peer_;
  r.transport = transport_;
  r.target = target_;
  r.bytes_from_app = bytes_up_;
  r.bytes_to_app = bytes_down_;
  std::string start = utc_timestamp(started_wall_);
  r.start = start;
  r.duration_us = static_cast<uint64_t>(since_start_us());
  r.session_wait_us = session_wait_us_;
  r.connect_us = connect_us_;
  r.first_byte_us = first_byte_us_;
  r.reset = how == Ending::kReset;
  r.ended_by = ended_by_;
  r.reason = end_reason_;
  host_.access_log->write(r);
}

void LocalStream::terminate(Ending how) {
  if (closing_) return;
  write_access_log(how);
  closing_ = true;
  stop_waiting();  // ended while waiting for a session: the link forgets it
  // The only clean close: both directions finished. Everything else keeps
  // the abortive close armed at construction, so the application sees RST.
  if (how == Ending::kClean) set_graceful_close(fd_.get());
  // to_socket_ is not cleared here: a send in flight may still read from its
  // buffers. They return to the pool when the object is deleted, after every
  // operation has completed (IoObject).
  if (recv_posted_) host_.loop.cancel(&recv_op_);
  if (sending_) host_.loop.cancel(&send_op_);
  if (error_poll_posted_) host_.loop.cancel(&error_poll_op_);
  if (connect_) connect_->cancel(host_.loop);
  retire();
}

}  // namespace rdmagw::local
