// SPDX-License-Identifier: Apache-2.0
// A takeover (docs/operations.md, "Takeover"): the old process freezes a
// resumable session and writes down its state; the new process rebuilds it,
// suspended, and resumes it with the peer over a new transport like after
// any transport loss. The peer cannot tell the two apart: the token, the
// counts and the kept frames are the same.
#include <cassert>
#include <cstring>

#include "common/log.h"
#include "proxy/tunnel/session.h"

namespace rdmagw::tunnel {

bool Session::freeze() {
  if (frozen_) return true;
  if (!resumable_ || peer_closing_ || state_ == State::kHandshake || state_ == State::kClosed) return false;
  assert(!parsing_);
  if (state_ == State::kOpen) mark_suspended();
  state_ = State::kResuming;
  frozen_ = true;
  drop_transport();
  log::info("session_frozen")
      .kv("peer", peer_label())
      .kv("role", role_ == Role::kDialer ? "dialer" : "acceptor")
      .kv("streams", streams_.size())
      .kv("unacknowledged_bytes", frames_->retained() + frames_->size());
  return true;
}

void Session::thaw() {
  if (!frozen_) return;
  frozen_ = false;
  // resume_timeout_ms counts from now: the takeover's time was not the peer's fault.
  suspended_at_ = loop().now();
  owner_events_ |= kOwnerSuspended;
  request_dispatch();
}

StreamTunnelImage Session::stream_image(const Stream& stream) {
  StreamTunnelImage out;
  out.id = stream.id_;
  out.send_available = stream.send_.available();
  out.receive_size = stream.receive_.size();
  out.receive_remaining = stream.receive_.remaining();
  out.receive_pending = stream.receive_.pending_grant();
  out.fin_sent = stream.fin_sent_;
  out.fin_received = stream.fin_received_;
  out.wants_credit = stream.wants_credit_;
  return out;
}

void Session::export_image(SessionImage* out) const {
  assert(frozen_ && events_.empty() && gathered_.empty());
  out->dialer = role_ == Role::kDialer;
  out->peer_label = settings_.peer_label;
  out->peer_node = peer_node_;
  out->peer_hello = peer_hello_;
  out->own_max_data = own_.max_data;
  out->own_stream_window = own_.stream_window;
  out->own_session_window = own_.session_window;
  out->own_capabilities = own_capabilities_;
  out->token = token_;
  out->received = received_;
  out->ack_sent = ack_sent_;
  out->peer_acked = peer_acked_;
  out->frames_base = frames_->base_offset();
  out->frames.clear();
  frames_->copy_out(&out->frames);
  out->next_local_id = next_local_id_;
  out->highest_remote_id = highest_remote_id_;
  out->session_send_available = session_send_.available();
  out->session_send_reserve = session_send_reserve_;
  out->session_receive_size = session_receive_.size();
  out->session_receive_remaining = session_receive_.remaining();
  out->session_receive_pending = session_receive_.pending_grant();
  out->goaway_sent = goaway_out_ == GoawayOut::kSent;
  out->goaway_received = goaway_received_;
  out->transport_kind = static_cast<uint8_t>(transport_kind_);
  out->age_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_wall_).count());
  out->frames_in = tally_.totals().frames_in;
  out->frames_out = tally_.totals().frames_out;
  out->bytes_in = tally_.totals().bytes_in;
  out->bytes_out = tally_.totals().bytes_out;
  out->streams_opened = tally_.totals().streams_opened;
  out->resumes = tally_.totals().resumes;
  out->resent_bytes = tally_.totals().resent_bytes;
  out->blocked.clear();
  for (const Stream* s : blocked_streams_) out->blocked.push_back(s->id_);
}

Session::Session(EventLoop& loop, BufferPool& pool, const SessionSettings& settings, const SessionImage& image,
                 SessionOwner* owner)
    : IoObject(loop),
      pool_(pool),
      role_(image.dialer ? Role::kDialer : Role::kAcceptor),
      settings_(settings),
      frames_(std::make_shared<ByteQueue>(&pool)),
      resumable_(true),
      token_(image.token),
      received_(image.received),
      ack_sent_(image.ack_sent),
      peer_acked_(image.peer_acked),
      transport_kind_(image.transport_kind == static_cast<uint8_t>(TransportKind::kRdma) ? TransportKind::kRdma
                                                                                         : TransportKind::kTcp),
      owner_(owner),
      state_(State::kResuming),
      peer_node_(image.peer_node),
      peer_hello_(image.peer_hello),
      own_capabilities_(image.own_capabilities),
      next_local_id_(image.next_local_id),
      highest_remote_id_(image.highest_remote_id),
      session_send_(image.session_send_available),
      session_send_reserve_(image.session_send_reserve),
      session_receive_(image.session_receive_size, image.session_receive_remaining, image.session_receive_pending) {
  // The peer holds us to what we announced (Session::same_settings on its
  // side): the resumes announce it again, whatever the new config says.
  const TunnelConfig& keys = *settings_.tunnel;
  own_.max_data = announced_max_data(image, keys);
  own_.stream_window = image.own_stream_window ? image.own_stream_window : keys.stream_window;
  own_.session_window = image.own_session_window ? image.own_session_window : keys.session_budget;
  started_ = last_receive_ = last_ping_ = last_ack_ = link_started_ = suspended_at_ = loop.now();
  suspended_kind_ = transport_kind_;  // the transport it had before the takeover
  started_wall_ = Clock::now() - std::chrono::milliseconds(image.age_ms);
  peer_opens_ = TokenBucket(keys.limits.opens_per_second, keys.limits.opens_per_second);
  goaway_out_ = image.goaway_sent ? GoawayOut::kSent : GoawayOut::kNone;
  goaway_received_ = draining_announced_ = image.goaway_received;
  tally_.totals().frames_in = image.frames_in;
  tally_.totals().frames_out = image.frames_out;
  tally_.totals().bytes_in = image.bytes_in;
  tally_.totals().bytes_out = image.bytes_out;
  tally_.totals().streams_opened = image.streams_opened;
  tally_.totals().resumes = image.resumes;
  tally_.totals().resent_bytes = image.resent_bytes;
  frames_->set_retain(true);
  frames_->set_base(image.frames_base);
  restored_frames_ = restore_frames(image.frames);
  if (settings_.metrics) {
    std::string label = role_ == Role::kDialer && !settings_.peer_label.empty() ? settings_.peer_label
                        : peer_node_.empty() ? std::string(metrics::WorkerMetrics::kUnnamedPeer)
                                             : peer_node_;
    tally_.set_peer(&settings_.metrics->peer(label));
  }
  log::info("session_adopted")
      .kv("peer", peer_label())
      .kv("role", role_ == Role::kDialer ? "dialer" : "acceptor")
      .kv("unacknowledged_bytes", image.frames.size());
}

bool Session::restore_frames(std::span<const uint8_t> frames) {
  // One frame per contiguous piece, as the session queued them: the RDMA
  // transport sends whole frames out of the queue's buffers, so a frame may
  // not straddle two of them.
  size_t off = 0;
  while (off < frames.size()) {
    if (frames.size() - off < kHeaderSize) return false;
    size_t len = kHeaderSize + get_u32(frames.data() + off + 8);
    if (len > frames.size() - off) return false;
    uint8_t* out = frames_->append_contiguous(len);
    if (!out) return false;
    std::memcpy(out, frames.data() + off, len);
    off += len;
  }
  return true;
}

void Session::restore_stream(Stream& stream, const StreamTunnelImage& image) {
  assert(!stream.session_);
  stream.session_ = this;
  stream.id_ = image.id;
  stream.send_ = SendCredit(image.send_available);
  stream.receive_ = ReceiveWindow(image.receive_size, image.receive_remaining, image.receive_pending);
  stream.fin_sent_ = image.fin_sent;
  stream.fin_received_ = image.fin_received;
  stream.wants_credit_ = image.wants_credit;
  stream.waits_for_session_ = false;
  streams_[image.id] = &stream;
  if (is_remote_id(image.id)) ++peer_streams_;
}

void Session::restore_blocked(const std::vector<uint32_t>& ids) {
  for (uint32_t id : ids) {
    auto it = streams_.find(id);
    if (it == streams_.end() || it->second->waits_for_session_) continue;
    it->second->waits_for_session_ = true;
    blocked_streams_.push_back(it->second);
  }
}

}  // namespace rdmagw::tunnel
