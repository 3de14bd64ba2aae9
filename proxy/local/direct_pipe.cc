#include "proxy/local/direct_pipe.h"

#include <cerrno>
#include <cstring>

#include "common/address.h"
#include "common/log.h"
#include "proxy/tunnel/frame.h"

namespace rdmagw::local {

DirectPipe::DirectPipe(StreamHost& host, UniqueFd client, std::string listener, metrics::ListenerMetrics* counters)
    : host_(host), client_(std::move(client)), listener_(std::move(listener)), counters_(counters) {
  if (counters_) counters_->active.add();
  connect_op_ = IoOp::bind<&DirectPipe::on_connect>(this);
  timeout_op_ = IoOp::bind<&DirectPipe::on_timeout>(this);
  for (Direction* d : {&up_, &down_}) {
    d->pipe = this;
    d->recv_op = IoOp::bind<&Direction::on_recv>(d);
    d->send_op = IoOp::bind<&Direction::on_send>(d);
  }
  ++host_.live_streams;
}

DirectPipe::~DirectPipe() {
  for (Direction* d : {&up_, &down_})
    if (d->buffer) host_.pool.release(d->buffer);
  --host_.live_streams;
  if (counters_) counters_->active.sub();
}

void DirectPipe::start(StreamHost& host, UniqueFd client, const sockaddr_storage& destination, socklen_t length,
                       std::string listener, metrics::ListenerMetrics* counters) {
  auto* p = new DirectPipe(host, std::move(client), std::move(listener), counters);
  p->addr_ = destination;
  p->addr_len_ = length;
  p->destination_ = sockaddr_to_string(reinterpret_cast<const sockaddr*>(&destination), length);
  int fd = ::socket(destination.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    p->fail("socket", errno);
    return;
  }
  p->server_.reset(fd);
  p->timeout_.tv_sec = host.connect_timeout_ms / 1000;
  p->timeout_.tv_nsec = (host.connect_timeout_ms % 1000) * 1000000LL;
  host.loop.reserve(2);
  io_uring_sqe* c = host.loop.sqe(&p->connect_op_);
  io_uring_prep_connect(c, fd, reinterpret_cast<const sockaddr*>(&p->addr_), p->addr_len_);
  c->flags |= IOSQE_IO_LINK;
  io_uring_sqe* t = host.loop.sqe(&p->timeout_op_);
  io_uring_prep_link_timeout(t, &p->timeout_, 0);
  p->inflight_ += 2;
}

void DirectPipe::on_timeout(int, uint32_t) { finish_op(); }

void DirectPipe::on_connect(int res, uint32_t) {
  if (closing_) return finish_op();
  if (res < 0) {
    fail("connect", res == -ECANCELED ? ETIMEDOUT : -res);
    return finish_op();
  }
  log::debug("passthrough_open").kv("listener", listener_).kv("destination", destination_);
  up_.from = client_.get();
  up_.to = server_.get();
  down_.from = server_.get();
  down_.to = client_.get();
  for (Direction* d : {&up_, &down_}) {
    d->buffer = host_.pool.acquire();
    if (!d->buffer) {
      fail("buffers", ENOBUFS);
      return finish_op();
    }
    post_recv(*d);
  }
  finish_op();
}

void DirectPipe::post_recv(Direction& d) {
  io_uring_sqe* s = host_.loop.sqe(&d.recv_op);
  io_uring_prep_recv(s, d.from, d.buffer, host_.pool.buffer_size(), 0);
  d.busy = true;
  ++inflight_;
}

void DirectPipe::post_send(Direction& d) {
  io_uring_sqe* s = host_.loop.sqe(&d.send_op);
  io_uring_prep_send(s, d.to, d.buffer + d.sent, d.filled - d.sent, MSG_NOSIGNAL);
  d.busy = true;
  ++inflight_;
}

void DirectPipe::Direction::on_recv(int res, uint32_t) {
  busy = false;
  DirectPipe& p = *pipe;
  if (p.closing_) return p.finish_op();
  if (res > 0) {
    filled = static_cast<uint32_t>(res);
    sent = 0;
    if (p.counters_) (this == &p.up_ ? p.counters_->bytes_received : p.counters_->bytes_sent).add(filled);
    p.post_send(*this);
  } else if (res == 0) {
    ended = true;
    ::shutdown(to, SHUT_WR);
    if (p.up_.ended && p.down_.ended) {
      p.closing_ = true;  // both ways done: a clean close
    }
  } else if (res != -EINTR && res != -EAGAIN) {
    p.fail("recv", -res);
  } else {
    p.post_recv(*this);
  }
  p.finish_op();
}

void DirectPipe::Direction::on_send(int res, uint32_t) {
  busy = false;
  DirectPipe& p = *pipe;
  if (p.closing_) return p.finish_op();
  if (res < 0 && res != -EINTR && res != -EAGAIN) {
    p.fail("send", -res);
    return p.finish_op();
  }
  if (res > 0) sent += static_cast<uint32_t>(res);
  if (sent < filled) p.post_send(*this);
  else p.post_recv(*this);
  p.finish_op();
}

void DirectPipe::fail(const char* what, int error) {
  if (closing_) return;
  closing_ = true;
  log::info("passthrough_reset")
      .kv("listener", listener_)
      .kv("destination", destination_)
      .kv("reason", std::string(what) + ": " + strerror(error));
  // RST on both sides, so neither application mistakes this for a clean end.
  linger lg{1, 0};
  setsockopt(client_.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  if (server_.valid()) setsockopt(server_.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  for (Direction* d : {&up_, &down_}) {
    if (d->busy) {
      host_.loop.cancel(&d->recv_op);
      host_.loop.cancel(&d->send_op);
    }
  }
  host_.loop.cancel(&connect_op_);
  if (inflight_ == 0) delete this;
}

void DirectPipe::finish_op() {
  --inflight_;
  if (closing_ && inflight_ == 0) delete this;
}

}  // namespace rdmagw::local
