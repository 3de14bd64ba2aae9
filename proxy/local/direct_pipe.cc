// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/direct_pipe.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/address.h"
#include "common/log.h"
#include "common/protocol_limits.h"
#include "common/socket_options.h"
#include "proxy/local/access_log.h"

namespace rdmagw::local {

DirectPipe::DirectPipe(StreamHost& host, UniqueFd client, std::string listener, metrics::ListenerMetrics* counters)
    : LocalConnection(host), client_(std::move(client)), listener_(std::move(listener)), counters_(counters) {
  set_abortive_close(client_.get());
  if (counters_) counters_->active.add();
  connect_.bind<&DirectPipe::on_connected>(this);
  for (Direction* d : {&up_, &down_}) {
    d->pipe = this;
    d->recv_op = IoOp::bind<&Direction::on_recv>(d, this);
    d->send_op = IoOp::bind<&Direction::on_send>(d, this);
  }
}

DirectPipe::~DirectPipe() {
  for (Direction* d : {&up_, &down_})
    if (d->buffer) host_.pool.release(d->buffer);
  take_terms();  // its place in the listener's count, given back before it stops counting as active
  if (counters_) counters_->active.sub();
}

void DirectPipe::start(StreamHost& host, UniqueFd client, const sockaddr_storage& destination, socklen_t length,
                       std::string listener, metrics::ListenerMetrics* counters, EndpointLease lease,
                       ListenerTerms terms) {
  auto* p = new DirectPipe(host, std::move(client), std::move(listener), counters);
  p->count_towards(std::move(lease));
  p->follow(std::move(terms));
  p->destination_ = sockaddr_to_string(reinterpret_cast<const sockaddr*>(&destination), length);
  if (host.access_log && host.access_log->enabled()) {
    p->client_address_ = peer_address(p->client_.get());
  }
  int fd = ::socket(destination.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    p->fail("socket", errno, "rdmagw");
    return;
  }
  p->server_.reset(fd);
  set_abortive_close(fd);
  p->connect_.start(host.loop, fd, destination, length, host.connect_timeout_ms);
}

void DirectPipe::on_connected(int error) {
  if (closing_) return;
  connect_us_ = since_start_us();
  if (error != 0) {
    fail("connect", error, "target");
    return;
  }
  log::debug("passthrough_open").kv("listener", listener_).kv("destination", destination_);
  join();
  post_recv(up_);
  post_recv(down_);
}

void DirectPipe::join() {
  connected_ = true;
  up_.from = client_.get();
  up_.to = server_.get();
  down_.from = server_.get();
  down_.to = client_.get();
}

void DirectPipe::post_recv(Direction& d) {
  if (frozen_) return;
  d.receive.post(host_, &d.recv_op, d.from, host_.payload_size);
  d.busy = true;
}

void DirectPipe::post_send(Direction& d) {
  if (frozen_) return;
  io_uring_sqe* s = host_.loop.sqe(&d.send_op);
  io_uring_prep_send(s, d.to, d.buffer + d.start + d.sent, d.filled - d.sent, MSG_NOSIGNAL);
  d.busy = true;
}

void DirectPipe::Direction::on_recv(int res, uint32_t flags) {
  busy = false;
  DirectPipe& p = *pipe;
  uint8_t* got = nullptr;
  res = receive.finish(p.host_, from, res, flags, !p.closing_, &got);
  if (res <= 0 && got) {
    p.host_.pool.release(got);
    got = nullptr;
  }
  if (p.closing_ || (p.frozen_ && res == -ECANCELED)) {
    if (got) p.host_.pool.release(got);
    return;
  }
  if (res > 0) {
    buffer = got;
    start = kBufferHeadroom;
    filled = static_cast<uint32_t>(res);
    if (total == 0 && this == &p.down_) p.first_byte_us_ = p.since_start_us();
    total += filled;
    sent = 0;
    if (p.counters_) (this == &p.up_ ? p.counters_->bytes_received : p.counters_->bytes_sent).add(filled);
    p.post_send(*this);
  } else if (res == 0) {
    ended = true;
    ::shutdown(to, SHUT_WR);
    if (p.up_.ended && p.down_.ended) p.end(true);  // both ways done: a clean close
  } else if (res == -EINTR || res == -EAGAIN || res == -ENOBUFS) {
    p.post_recv(*this);
  } else {
    bool ours = res == -ENOMEM;
    p.fail(ours ? "buffers" : "recv", ours ? ENOBUFS : -res, ours ? "rdmagw" : this == &p.up_ ? "client" : "target");
  }
}

void DirectPipe::Direction::on_send(int res, uint32_t) {
  busy = false;
  DirectPipe& p = *pipe;
  if (p.closing_ || (p.frozen_ && res == -ECANCELED)) return;
  if (res < 0 && res != -EINTR && res != -EAGAIN) {
    p.fail("send", -res, this == &p.up_ ? "target" : "client");
    return;
  }
  if (res > 0) sent += static_cast<uint32_t>(res);
  if (sent < filled) {
    p.post_send(*this);
    return;
  }
  p.host_.pool.release(std::exchange(buffer, nullptr));  // all sent: idle again, holding nothing
  filled = sent = 0;
  p.post_recv(*this);
}

void DirectPipe::end_idle() {
  if (counters_) counters_->idle_closed.add();
  host_.metrics.failed(metrics::StreamFailure::kIdle);
  fail("idle-timeout", 0, "rdmagw");
}

void DirectPipe::fail(std::string_view what, int error, std::string_view by) {
  if (closing_) return;
  std::string reason = error ? std::string(what) + ": " + strerror(error) : std::string(what);
  log::info("passthrough_reset").kv("listener", listener_).kv("destination", destination_).kv("reason", reason);
  ended_by_ = by;
  end_reason_ = std::move(reason);
  end(false);
}

void DirectPipe::end(bool clean) {
  if (closing_) return;
  closing_ = true;
  if (host_.access_log && host_.access_log->enabled()) {
    AccessRecord r;
    r.direction = "passthrough";
    r.listener = listener_;
    r.client = client_address_;
    r.destination = destination_;
    r.bytes_from_app = up_.total;
    r.bytes_to_app = down_.total;
    std::string start = utc_timestamp(started_wall_);
    r.start = start;
    r.duration_us = static_cast<uint64_t>(since_start_us());
    r.connect_us = connect_us_;
    r.first_byte_us = first_byte_us_;
    r.reset = !clean;
    r.ended_by = ended_by_;
    r.reason = end_reason_;
    host_.access_log->write(r);
  }
  // Only a pipe that finished both ways closes with FIN; otherwise the
  // abortive close armed at the start resets both applications.
  if (clean) {
    set_graceful_close(client_.get());
    set_graceful_close(server_.get());
  }
  for (Direction* d : {&up_, &down_}) {
    if (d->busy) {
      host_.loop.cancel(&d->recv_op);
      host_.loop.cancel(&d->send_op);
    }
  }
  connect_.cancel(host_.loop);
  retire();
}

}  // namespace rdmagw::local
