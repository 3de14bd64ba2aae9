// SPDX-License-Identifier: Apache-2.0
// A takeover moves a passthrough connection to a new process
// (docs/operations.md, "Takeover"): both sockets, and the bytes each
// direction had received and not yet passed on.
#include <cstring>
#include <tuple>
#include <utility>

#include "common/protocol_limits.h"
#include "proxy/local/direct_pipe.h"

namespace rdmagw::local {

void DirectPipe::freeze() {
  if (frozen_ || closing_) return;
  frozen_ = true;
  for (Direction* d : {&up_, &down_}) {
    if (d->busy) {
      host_.loop.cancel(&d->recv_op);
      host_.loop.cancel(&d->send_op);
    }
  }
  connect_.cancel(host_.loop);  // the kernel goes on connecting
}

bool DirectPipe::export_image(HandoverImages* out, const SessionIndex&) const {
  if (closing_ || !server_.valid()) return false;
  PipeImage image;
  image.connecting = !connected_;
  image.listener = listener_;
  image.destination = destination_;
  for (auto [d, bytes] : {std::pair{&up_, &image.up}, std::pair{&down_, &image.down}})
    if (connected_ && d->buffer) bytes->assign(d->buffer + d->start + d->sent, d->buffer + d->start + d->filled);
  image.up_ended = up_.ended;
  image.down_ended = down_.ended;
  image.age_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count());
  image.connect_us = static_cast<uint64_t>(connect_us_ + 1);
  image.first_byte_us = static_cast<uint64_t>(first_byte_us_ + 1);
  image.client_fd = static_cast<uint32_t>(out->fds.size());
  out->fds.push_back(client_.get());
  image.server_fd = static_cast<uint32_t>(out->fds.size());
  out->fds.push_back(server_.get());
  out->pipes.push_back(std::move(image));
  return true;
}

void DirectPipe::forget() {
  if (closing_) return;
  closing_ = true;
  retire();
}

void DirectPipe::restore(StreamHost& host, UniqueFd client, UniqueFd server, const PipeImage& image,
                         metrics::ListenerMetrics* counters, ListenerTerms terms) {
  auto* p = new DirectPipe(host, std::move(client), image.listener, counters);
  p->follow(std::move(terms));
  p->started_ = Clock::now() - std::chrono::milliseconds(image.age_ms);
  p->started_wall_ = std::chrono::system_clock::now() - std::chrono::milliseconds(image.age_ms);
  p->connect_us_ = static_cast<int64_t>(image.connect_us) - 1;
  p->first_byte_us_ = static_cast<int64_t>(image.first_byte_us) - 1;
  p->destination_ = image.destination;
  p->server_ = std::move(server);
  if (image.connecting) {
    p->connect_.wait(host.loop, p->server_.get(), host.connect_timeout_ms);
    return;
  }
  p->join();
  // Up to a whole buffer: an older rdmagw received into all of it.
  size_t room = host.pool.buffer_size();
  if (image.up.size() > room || image.down.size() > room) {
    p->fail("takeover", EMSGSIZE, "rdmagw");
    return;
  }
  for (auto [d, bytes, ended] :
       {std::tuple{&p->up_, &image.up, image.up_ended}, std::tuple{&p->down_, &image.down, image.down_ended}}) {
    d->ended = ended;
    if (bytes->empty()) continue;
    d->buffer = host.pool.acquire();
    if (!d->buffer) {
      p->fail("takeover", ENOBUFS, "rdmagw");
      return;
    }
    d->start = bytes->size() <= room - kBufferHeadroom ? kBufferHeadroom : 0;
    std::memcpy(d->buffer + d->start, bytes->data(), bytes->size());
    d->filled = static_cast<uint32_t>(bytes->size());
    d->sent = 0;
  }
  p->resume_io();
}

void DirectPipe::thaw() {
  if (!frozen_ || closing_) return;
  frozen_ = false;
  if (!connected_) {
    connect_.wait(host_.loop, server_.get(), host_.connect_timeout_ms);
    return;
  }
  resume_io();
}

void DirectPipe::resume_io() {
  if (up_.ended && down_.ended) {
    end(true);
    return;
  }
  for (Direction* d : {&up_, &down_}) {
    if (d->filled > d->sent)
      post_send(*d);
    else if (!d->ended)
      post_recv(*d);
  }
}

}  // namespace rdmagw::local
