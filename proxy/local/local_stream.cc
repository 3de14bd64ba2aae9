#include "proxy/local/local_stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/log.h"
#include "common/socket_options.h"

namespace rdmagw::local {

using tunnel::kBufferHeadroom;
using tunnel::ResetCode;

LocalStream::LocalStream(StreamHost& host, UniqueFd fd)
    : host_(host), fd_(std::move(fd)), to_socket_(&host.pool) {
  recv_op_ = IoOp::bind<&LocalStream::on_recv>(this);
  send_op_ = IoOp::bind<&LocalStream::on_send>(this);
  connect_op_ = IoOp::bind<&LocalStream::on_connect>(this);
  timeout_op_ = IoOp::bind<&LocalStream::on_connect_timeout>(this);
  error_poll_op_ = IoOp::bind<&LocalStream::on_error_poll>(this);
  started_ = Clock::now();
  ++host_.live_streams;
  next_ = host_.first_stream;
  if (next_) next_->prev_ = this;
  host_.first_stream = this;
}

LocalStream::~LocalStream() {
  if (recv_buffer_) host_.pool.release(recv_buffer_);
  if (parked_buffer_) host_.pool.release(parked_buffer_);
  --host_.live_streams;
  if (listener_counters_) listener_counters_->active.sub();
  if (target_side_) host_.metrics.target_streams_active.sub();
  if (prev_) prev_->next_ = next_;
  else host_.first_stream = next_;
  if (next_) next_->prev_ = prev_;
}

LocalStream* LocalStream::from_client(StreamHost& host, UniqueFd fd, std::string listener,
                                      metrics::ListenerMetrics* counters, std::string peer, std::string target) {
  set_nodelay(fd.get());
  auto* s = new LocalStream(host, std::move(fd));
  s->listener_ = std::move(listener);
  s->peer_ = std::move(peer);
  s->target_ = std::move(target);
  s->listener_counters_ = counters;
  if (counters) {
    counters->accepted.add();
    counters->active.add();
  }
  return s;
}

void LocalStream::describe(admin::StreamInfo* out) const {
  out->worker = host_.worker;
  out->side = target_side_ ? "target" : "client";
  out->listener = listener_;
  out->peer = peer_;
  out->target = target_;
  out->stream_id = id_;
  out->age_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count());
  out->bytes_from_app = bytes_up_;
  out->bytes_to_app = bytes_down_;
  if (connecting_) out->state = "connecting";
  else if (!target_side_ && !session_ && id_ == 0) out->state = "waiting";
  else if (read_closed_ || remote_fin_ || write_shut_) out->state = "half-closed";
  else out->state = "open";
}

namespace {
metrics::StreamFailure failure_of(ResetCode code) {
  switch (code) {
    case ResetCode::kCancel: return metrics::StreamFailure::kReset;
    case ResetCode::kRefused: return metrics::StreamFailure::kTargetRefused;
    case ResetCode::kConnectFailed: return metrics::StreamFailure::kTargetUnreachable;
    case ResetCode::kNotAllowed: return metrics::StreamFailure::kNotAllowed;
    case ResetCode::kPeerGone: return metrics::StreamFailure::kPeerGone;
    case ResetCode::kProtocol: return metrics::StreamFailure::kProtocol;
    case ResetCode::kResource: return metrics::StreamFailure::kResource;
    case ResetCode::kShutdown: return metrics::StreamFailure::kShutdown;
  }
  return metrics::StreamFailure::kProtocol;
}
}  // namespace

void LocalStream::count_failure(metrics::StreamFailure why) {
  if (failure_counted_) return;
  failure_counted_ = true;
  host_.metrics.failed(why);
}

void LocalStream::add_bytes_from_app(uint64_t n) {
  bytes_up_ += n;
  if (listener_counters_) listener_counters_->bytes_received.add(n);
}

void LocalStream::add_bytes_to_app(uint64_t n) {
  bytes_down_ += n;
  if (listener_counters_) listener_counters_->bytes_sent.add(n);
}

LocalStream* LocalStream::to_target(StreamHost& host, tunnel::Session& session, uint32_t id,
                                    const Endpoint& target, ResetCode* refuse) {
  int fd = ::socket(target.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    log::warn("stream_refused")
        .kv("peer", session.peer_node())
        .kv("stream", id)
        .kv("target", target.to_string())
        .kv("reason", "socket-failed")
        .kv("error", strerror(errno));
    *refuse = ResetCode::kResource;
    return nullptr;
  }
  auto* s = new LocalStream(host, UniqueFd(fd));
  s->target_side_ = true;
  host.metrics.target_streams_active.add();
  host.metrics.streams_opened_inbound.add();
  s->session_ = &session;
  s->id_ = id;
  s->peer_ = session.peer_node();
  s->target_ = target.to_string();
  s->start_connect(target);
  return s;
}

// --- connecting to the target (far side) --------------------------------------

void LocalStream::start_connect(const Endpoint& target) {
  connecting_ = true;
  target_addr_ = target.addr;
  target_len_ = target.addr_len;
  connect_timeout_.tv_sec = host_.connect_timeout_ms / 1000;
  connect_timeout_.tv_nsec = (host_.connect_timeout_ms % 1000) * 1000000LL;
  host_.loop.reserve(2);
  io_uring_sqe* c = host_.loop.sqe(&connect_op_);
  io_uring_prep_connect(c, fd_.get(), reinterpret_cast<sockaddr*>(&target_addr_), target_len_);
  c->flags |= IOSQE_IO_LINK;
  io_uring_sqe* t = host_.loop.sqe(&timeout_op_);
  io_uring_prep_link_timeout(t, &connect_timeout_, 0);
  inflight_ += 2;
}

void LocalStream::on_connect_timeout(int, uint32_t) { finish_op(); }

void LocalStream::on_connect(int res, uint32_t) {
  connecting_ = false;
  if (closing_) return finish_op();
  if (res < 0) {
    int err = res == -ECANCELED ? ETIMEDOUT : -res;
    log::warn("stream_refused")
        .kv("peer", peer_)
        .kv("stream", id_)
        .kv("target", target_)
        .kv("reason", "connect-failed")
        .kv("error", strerror(err));
    count_failure(err == ECONNREFUSED ? metrics::StreamFailure::kTargetRefused
                                      : metrics::StreamFailure::kTargetUnreachable);
    if (session_) session_->reset_stream(id_, err == ECONNREFUSED ? ResetCode::kRefused : ResetCode::kConnectFailed);
    session_ = nullptr;
    terminate(false);
    return finish_op();
  }
  set_nodelay(fd_.get());
  host_.metrics.target_connect.observe_us(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count()));
  log::debug("stream_connected").kv("peer", peer_).kv("stream", id_).kv("target", target_);
  start_reading();
  pump_send();
  maybe_shutdown_write();
  finish_op();
}

// --- dialing side: waiting for and opening on a session -----------------------

void LocalStream::attach(tunnel::Session& session) {
  if (closing_) return;
  uint8_t* buffer = host_.pool.acquire();
  if (!buffer) {
    abort(ResetCode::kResource, "out of buffers");
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
  session_ = &session;
  peer_ = session.peer_node().empty() ? peer_ : session.peer_node();
  id_ = session.open_stream(this, target_, buffer, static_cast<uint32_t>(n));
  if (id_ == 0) {
    session_ = nullptr;
    count_failure(metrics::StreamFailure::kResource);
    terminate(true);
    return;
  }
  host_.metrics.streams_opened_outbound.add();
  host_.metrics.stream_open.observe_us(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count()));
  add_bytes_from_app(static_cast<uint64_t>(n));
  log::debug("stream_open").kv("listener", listener_).kv("peer", peer_).kv("stream", id_).kv("target", target_);
  if (eof) {
    read_closed_ = true;
    session_->send_fin(id_);
    maybe_done();
    return;
  }
  start_reading();
}

void LocalStream::abort(ResetCode code, std::string_view reason) {
  log::warn("stream_failed")
      .kv("listener", listener_)
      .kv("peer", peer_)
      .kv("target", target_)
      .kv("reason", reason)
      .kv("code", tunnel::reset_code_name(code));
  // kPeerGone here means no session came up for the stream in time.
  count_failure(code == ResetCode::kPeerGone ? metrics::StreamFailure::kNoSession : failure_of(code));
  session_ = nullptr;
  terminate(true);
}

// --- socket -> tunnel --------------------------------------------------------

void LocalStream::start_reading() {
  if (recv_posted_ || read_closed_ || closing_ || connecting_ || parked_buffer_ || !session_) return;
  // Only stream credit is held while the receive waits: an idle connection
  // must not pin any of the session's shared budget.
  uint32_t credit = session_->take_stream_credit(id_, host_.payload_size);
  if (credit == 0) {  // on_send_credit() resumes us
    watch_for_errors();
    return;
  }
  uint8_t* buffer = host_.pool.acquire();
  if (!buffer) {
    session_->refund_stream_credit(id_, credit);
    log::warn("stream_reset").kv("peer", peer_).kv("stream", id_).kv("reason", "out of buffers");
    count_failure(metrics::StreamFailure::kResource);
    session_->reset_stream(id_, ResetCode::kResource);
    session_ = nullptr;
    terminate(true);
    return;
  }
  recv_buffer_ = buffer;
  recv_credit_ = credit;
  io_uring_sqe* s = host_.loop.sqe(&recv_op_);
  io_uring_prep_recv(s, fd_.get(), buffer + kBufferHeadroom, credit, 0);
  recv_posted_ = true;
  ++inflight_;
}

void LocalStream::on_recv(int res, uint32_t) {
  recv_posted_ = false;
  uint8_t* buffer = recv_buffer_;
  recv_buffer_ = nullptr;
  if (closing_ || !session_) {
    host_.pool.release(buffer);
    return finish_op();
  }
  if (res > 0) {
    session_->refund_stream_credit(id_, recv_credit_ - static_cast<uint32_t>(res));
    forward(buffer, static_cast<uint32_t>(res));
    return finish_op();
  }
  session_->refund_stream_credit(id_, recv_credit_);
  host_.pool.release(buffer);
  if (res == 0) {
    read_closed_ = true;
    session_->send_fin(id_);
    maybe_done();
  } else if (res == -EINTR || res == -EAGAIN) {
    start_reading();
  } else {
    // The application reset its connection: abort the whole stream.
    log::info("stream_reset").kv("peer", peer_).kv("stream", id_).kv("reason", "local-reset").kv("error", strerror(-res));
    count_failure(metrics::StreamFailure::kReset);
    session_->reset_stream(id_, ResetCode::kCancel);
    session_ = nullptr;
    terminate(true);
  }
  finish_op();
}

void LocalStream::forward(uint8_t* buffer, uint32_t len) {
  if (!session_->take_session_credit(id_, len)) {
    parked_buffer_ = buffer;
    parked_len_ = len;
    watch_for_errors();
    return;
  }
  session_->send_data(id_, buffer, len);
  add_bytes_from_app(len);
  start_reading();
}

// --- tunnel -> socket --------------------------------------------------------

bool LocalStream::on_data(std::span<const uint8_t> bytes) {
  if (closing_) return true;
  // Fast path: nothing queued ahead of these bytes, so try to hand them to the
  // socket straight from the tunnel's receive buffer. This skips the copy into
  // to_socket_ and an io_uring round trip; whatever the socket does not take
  // now is queued as usual. Errors are left to the queued send to report.
  if (!sending_ && !connecting_ && to_socket_.empty() && !write_shut_) {
    ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      add_bytes_to_app(static_cast<uint64_t>(n));
      bytes = bytes.subspan(static_cast<size_t>(n));
      if (session_) session_->delivered(id_, static_cast<uint32_t>(n));
      if (bytes.empty()) return true;
    }
  }
  if (!to_socket_.append(bytes.data(), bytes.size())) return false;
  pump_send();
  return true;
}

void LocalStream::pump_send() {
  if (sending_ || closing_ || connecting_ || to_socket_.empty()) return;
  int n = to_socket_.front_iovecs(iov_, kMaxIov);
  msg_ = {};
  msg_.msg_iov = iov_;
  msg_.msg_iovlen = static_cast<size_t>(n);
  io_uring_sqe* s = host_.loop.sqe(&send_op_);
  io_uring_prep_sendmsg(s, fd_.get(), &msg_, MSG_NOSIGNAL);
  sending_ = true;
  ++inflight_;
}

void LocalStream::on_send(int res, uint32_t) {
  sending_ = false;
  if (closing_) return finish_op();
  if (res < 0) {
    if (res == -EINTR || res == -EAGAIN) {
      pump_send();
      return finish_op();
    }
    log::info("stream_reset").kv("peer", peer_).kv("stream", id_).kv("reason", "local-reset").kv("error", strerror(-res));
    count_failure(metrics::StreamFailure::kReset);
    if (session_) session_->reset_stream(id_, ResetCode::kCancel);
    session_ = nullptr;
    terminate(true);
    return finish_op();
  }
  to_socket_.consume(static_cast<size_t>(res));
  add_bytes_to_app(static_cast<uint64_t>(res));
  if (session_) session_->delivered(id_, static_cast<uint32_t>(res));
  pump_send();
  maybe_shutdown_write();
  finish_op();
}

void LocalStream::on_fin() {
  remote_fin_ = true;
  maybe_shutdown_write();
}

void LocalStream::maybe_shutdown_write() {
  if (!remote_fin_ || write_shut_ || sending_ || connecting_ || closing_ || !to_socket_.empty()) return;
  ::shutdown(fd_.get(), SHUT_WR);
  write_shut_ = true;
  maybe_done();
}

// --- teardown --------------------------------------------------------------------

void LocalStream::on_reset(ResetCode code) {
  // The session has already forgotten the stream.
  session_ = nullptr;
  if (closing_) return;
  log::info("stream_reset")
      .kv("listener", listener_)
      .kv("peer", peer_)
      .kv("stream", id_)
      .kv("target", target_)
      .kv("reason", tunnel::reset_code_name(code));
  count_failure(failure_of(code));
  terminate(true);
}

void LocalStream::watch_for_errors() {
  if (error_poll_posted_ || closing_) return;
  io_uring_sqe* s = host_.loop.sqe(&error_poll_op_);
  io_uring_prep_poll_add(s, fd_.get(), POLLERR);  // POLLHUP is always reported too
  error_poll_posted_ = true;
  ++inflight_;
}

void LocalStream::on_error_poll(int res, uint32_t) {
  error_poll_posted_ = false;
  if (closing_ || res < 0 || !(res & POLLERR)) return finish_op();
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  log::info("stream_reset")
      .kv("peer", peer_)
      .kv("stream", id_)
      .kv("reason", "local-reset")
      .kv("error", strerror(err ? err : ECONNRESET));
  count_failure(metrics::StreamFailure::kReset);
  if (session_) session_->reset_stream(id_, ResetCode::kCancel);
  session_ = nullptr;
  terminate(true);
  finish_op();
}

void LocalStream::on_send_credit() {
  if (closing_ || !session_) return;
  if (parked_buffer_) {
    uint8_t* buffer = std::exchange(parked_buffer_, nullptr);
    forward(buffer, std::exchange(parked_len_, 0));
    return;
  }
  start_reading();
}

void LocalStream::on_detached() {
  // The session is gone, but our FIN went out and the peer's came in: only
  // the bytes queued for our socket remain, and they need no session.
  session_ = nullptr;
  maybe_shutdown_write();
}

void LocalStream::maybe_done() {
  if (!read_closed_ || !write_shut_ || closing_) return;
  log::debug("stream_closed")
      .kv("peer", peer_)
      .kv("stream", id_)
      .kv("bytes_up", bytes_up_)
      .kv("bytes_down", bytes_down_);
  if (session_) session_->stream_done(id_);
  session_ = nullptr;
  terminate(false);
}

void LocalStream::terminate(bool abortive) {
  if (closing_) return;
  closing_ = true;
  // to_socket_ is not cleared here: a send in flight may still read from its
  // buffers. The destructor returns them once every operation has completed.
  if (abortive) {
    // SO_LINGER 0: close() sends RST, so the application sees a reset
    // rather than a clean EOF it could mistake for a complete reply.
    linger lg{1, 0};
    setsockopt(fd_.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  }
  if (recv_posted_) host_.loop.cancel(&recv_op_);
  if (sending_) host_.loop.cancel(&send_op_);
  if (connecting_) host_.loop.cancel(&connect_op_);
  if (error_poll_posted_) host_.loop.cancel(&error_poll_op_);
  if (inflight_ == 0) delete this;
}

void LocalStream::finish_op() {
  --inflight_;
  if (closing_ && inflight_ == 0) delete this;
}

}  // namespace rdmagw::local
