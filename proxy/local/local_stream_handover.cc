// SPDX-License-Identifier: Apache-2.0
// A takeover moves a stream to a new process (docs/operations.md,
// "Takeover"): the old process stops its I/O and writes down its state and
// the bytes it held; the new one rebuilds it on the same socket and on the
// session it belongs to, and carries on.
#include <cstring>

#include "common/log.h"
#include "proxy/local/local_stream.h"

namespace rdmagw::local {

using tunnel::kBufferHeadroom;

void LocalStream::freeze() {
  if (frozen_ || closing_) return;
  frozen_ = true;
  if (recv_posted_) host_.loop.cancel(&recv_op_);
  if (sending_) host_.loop.cancel(&send_op_);
  if (error_poll_posted_) host_.loop.cancel(&error_poll_op_);
  // The kernel goes on connecting; the new process waits for the outcome.
  if (phase_ == Phase::kConnecting && connect_) connect_->cancel(host_.loop);
}

bool LocalStream::export_image(HandoverImages* out, const SessionIndex& sessions) const {
  if (closing_) return false;
  LocalStreamImage image;
  if (session()) {
    auto it = sessions.find(session());
    if (it == sessions.end()) return false;
    image.session = it->second;
    image.tunnel = tunnel::Session::stream_image(*this);
  }
  image.fd = static_cast<uint32_t>(out->fds.size());
  image.target_side = target_side_;
  image.opened = phase_ != Phase::kWaiting;
  image.connecting = phase_ == Phase::kConnecting;
  image.read_closed = read_closed_;
  image.remote_fin = fin_received();
  image.write_shut = write_shut_;
  image.listener = listener_;
  image.peer = peer_;
  image.target = target_;
  image.bytes_up = bytes_up_;
  image.bytes_down = bytes_down_;
  image.age_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count());
  to_socket_.copy_out(&image.to_socket);
  if (parked_buffer_)
    image.parked.assign(parked_buffer_ + kBufferHeadroom, parked_buffer_ + kBufferHeadroom + parked_len_);
  if (leg_) image.leg = leg_->image();
  image.origin.resize(tunnel::origin_length(origin_));
  tunnel::encode_origin(image.origin.data(), origin_);
  image.client = client_;
  image.destination = destination_;
  image.remote = remote_;
  if (proxy_header_) image.proxy_header.assign(proxy_header_->begin(), proxy_header_->end());
  image.session_wait_us = static_cast<uint64_t>(session_wait_us_ + 1);
  image.connect_us = static_cast<uint64_t>(connect_us_ + 1);
  image.first_byte_us = static_cast<uint64_t>(first_byte_us_ + 1);
  out->fds.push_back(fd_.get());
  out->streams.push_back(std::move(image));
  return true;
}

void LocalStream::forget() {
  if (closing_) return;
  closing_ = true;
  stop_waiting();
  if (session()) session()->detach(*this);
  retire();
}

void LocalStream::thaw() {
  if (!frozen_ || closing_) return;
  frozen_ = false;
  resume_io();
}

LocalStream* LocalStream::restore(StreamHost& host, UniqueFd fd, const LocalStreamImage& image,
                                  tunnel::Session* session, metrics::ListenerMetrics* counters) {
  auto* s = new LocalStream(host, std::move(fd));
  s->started_ = Clock::now() - std::chrono::milliseconds(image.age_ms);
  s->started_wall_ = std::chrono::system_clock::now() - std::chrono::milliseconds(image.age_ms);
  s->target_side_ = image.target_side;
  if (s->target_side_) host.metrics.target_streams_active.add();
  s->listener_counters_ = counters;
  if (counters) counters->active.add();
  // The image's flags are the states' (takeover_image.cc refuses flags no
  // state has: connecting without a stream id, shut without the peer's FIN).
  s->phase_ = image.connecting ? Phase::kConnecting : image.opened ? Phase::kOpen : Phase::kWaiting;
  s->read_closed_ = image.read_closed;
  s->write_shut_ = image.write_shut;
  s->listener_ = image.listener;
  s->peer_ = image.peer;
  s->target_ = image.target;
  s->bytes_up_ = image.bytes_up;
  s->bytes_down_ = image.bytes_down;
  std::string ignored;  // the image's decoder checked it
  if (!image.origin.empty()) tunnel::decode_origin(image.origin, &s->origin_, &ignored);
  s->client_ = image.client;
  s->destination_ = image.destination;
  s->remote_ = image.remote;
  if (!image.proxy_header.empty())
    s->proxy_header_ = std::make_unique<std::string>(image.proxy_header.begin(), image.proxy_header.end());
  s->session_wait_us_ = static_cast<int64_t>(image.session_wait_us) - 1;
  s->connect_us_ = static_cast<int64_t>(image.connect_us) - 1;
  s->first_byte_us_ = static_cast<int64_t>(image.first_byte_us) - 1;
  bool ok = s->to_socket_.append(image.to_socket.data(), image.to_socket.size());
  if (ok && !image.parked.empty()) {
    s->parked_buffer_ = host.pool.acquire();
    ok = s->parked_buffer_ && image.parked.size() <= host.payload_size;
    if (ok) {
      std::memcpy(s->parked_buffer_ + kBufferHeadroom, image.parked.data(), image.parked.size());
      s->parked_len_ = static_cast<uint32_t>(image.parked.size());
    }
  }
  // Its flows stay in the maps the takeover brought (the read counter's
  // slot was claimed before any worker admits): the leg carries on before
  // the first read or send here.
  if (image.leg.present && host.redirector) s->leg_ = RedirectedLeg::restore(*host.redirector, image.leg);
  if (session)
    session->restore_stream(*s, image.tunnel);
  else
    s->restore_peer_fin(image.remote_fin);  // both FINs had crossed: the session is gone
  if (!ok) {
    s->fail("stream_failed", "rdmagw", metrics::StreamFailure::kResource, tunnel::ResetCode::kResource,
            "out of buffers for the bytes a takeover moved");
    return nullptr;
  }
  s->resume_io();
  return s;
}

void LocalStream::resume_io() {
  if (phase_ == Phase::kConnecting) {
    connector().wait(host_.loop, fd_.get(), host_.connect_timeout_ms);
    return;
  }
  if (phase_ == Phase::kWaiting) return;  // waits for a session: attach() starts it
  pump_send();
  maybe_shutdown_write();
  start_reading();
  if (read_closed_ || parked_buffer_) watch_for_errors();
  maybe_done();
}

}  // namespace rdmagw::local
