// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/rdma_transport.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/protocol_limits.h"
#include "proxy/transport/rdma/connect_params.h"
#include "proxy/transport/rdma/frame_packing.h"
#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/frame_delivery.h"

namespace rdmagw::transport {

namespace {
constexpr uint64_t kSendTag = 1ull << 63;
constexpr size_t kSlotSize = 16;

bool set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// REJECTED carries an IB CM reject reason over IB and RoCE (positive), an
// errno over iWARP (negative).
std::string reject_text(int status) {
  if (status == 8) return "nothing listens on that port (IB CM reason 8, invalid service id)";
  if (status == 28) return "its rdmagw refused it (IB CM reason 28, consumer defined)";
  if (status > 0) return "IB CM reject reason " + std::to_string(status);
  return std::string(strerror(-status)) + " (status " + std::to_string(status) + ")";
}

std::string cm_status_text(int status) {
  if (status == 0) return "ok";
  return std::string(strerror(status < 0 ? -status : status)) + " (status " + std::to_string(status) + ")";
}
}  // namespace

RdmaTransport::RdmaTransport(EventLoop& loop, RdmaContext& ctx, uint32_t max_data, Observer* observer)
    : tunnel::Transport(loop),
      ctx_(ctx),
      pool_(ctx.pool()),
      config_(ctx.config()),
      observer_(observer),
      reader_(max_data),
      outbound_(&ctx.pool()) {
  cm_op_ = IoOp::bind<&RdmaTransport::on_cm_ready>(this);
  flush_timer_op_ = IoOp::bind<&RdmaTransport::on_flush_timeout>(this);
  dial_timer_op_ = IoOp::bind<&RdmaTransport::on_dial_timeout>(this);
  cq_op_ = IoOp::bind<&RdmaTransport::on_cq_ready>(this);
  ctx_.transport_added();
}

RdmaTransport::~RdmaTransport() {
  ctx_.transport_removed();
  // The QP is gone (close() destroyed it), so nothing DMAs into the slab.
  if (id_ && id_->qp) rdma_destroy_qp(id_);
  for (uint8_t* b : recv_buffers_)
    if (b) pool_.release(b);
  for (uint8_t* b : slot_sealed_)
    if (b) pool_.release(b);
  if (header_slots_) pool_.release(header_slots_);
  if (cq_) ibv_destroy_cq(cq_);
  if (comp_channel_) ibv_destroy_comp_channel(comp_channel_);
  // After the QP and CQ that used its PD and MR, and before the id: the
  // device's verbs context is librdmacm's, which closes it when the last id
  // on a removed device goes; our PD and MR must be gone by then.
  ctx_.release(device_);
  if (id_) rdma_destroy_id(id_);
  if (channel_) rdma_destroy_event_channel(channel_);
}

bool RdmaTransport::open_channel(std::string* error) {
  channel_ = rdma_create_event_channel();
  if (!channel_ || !set_nonblocking(channel_->fd)) {
    *error = std::string("rdma_create_event_channel: ") + strerror(errno);
    return false;
  }
  return true;
}

IoPtr<RdmaTransport> RdmaTransport::dial(EventLoop& loop, RdmaContext& ctx, const Endpoint& peer, uint32_t max_data,
                                         uint32_t timeout_ms, const tunnel::SessionToken* session, Observer* observer,
                                         std::string* error, const Endpoint* source) {
  auto t = make_io<RdmaTransport>(loop, ctx, max_data, nullptr);
  t->remote_ = "rdma:" + sockaddr_to_string(reinterpret_cast<const sockaddr*>(&peer.addr), peer.addr_len);
  t->timeout_ms_ = timeout_ms;
  if (session) t->session_ = *session;
  if (!t->open_channel(error) || rdma_create_id(t->channel_, &t->id_, t.get(), RDMA_PS_TCP) != 0) {
    if (error->empty()) *error = std::string("rdma_create_id: ") + strerror(errno);
    t->close(tunnel::CloseMode::kAbort);
    return nullptr;
  }
  sockaddr_storage dst = peer.addr;
  sockaddr_storage src = source ? source->addr : sockaddr_storage{};
  if (rdma_resolve_addr(t->id_, source ? reinterpret_cast<sockaddr*>(&src) : nullptr, reinterpret_cast<sockaddr*>(&dst),
                        static_cast<int>(timeout_ms)) != 0) {
    *error = std::string("rdma_resolve_addr: ") + strerror(errno);
    if (source) *error += " (from tunnel.address " + source->to_string() + ")";
    t->close(tunnel::CloseMode::kAbort);
    return nullptr;
  }
  t->observer_ = observer;
  t->arm_cm_poll();
  t->arm_dial_timer();
  return t;
}

uint32_t RdmaTransport::dial_deadline_ms() const {
  // Never under 10 s: the kernel's RDMA CM resends an unanswered request
  // after about 4 s, and a busy acceptor (several connects placed at once)
  // can take seconds to answer; a dial cut shorter fails connects that
  // would have completed.
  return std::max<uint32_t>(timeout_ms_, 10000);
}

void RdmaTransport::arm_dial_timer() {
  const uint32_t ms = dial_deadline_ms();
  dial_timeout_.tv_sec = ms / 1000;
  dial_timeout_.tv_nsec = static_cast<long long>(ms % 1000) * 1000000;
  io_uring_sqe* s = loop().sqe(&dial_timer_op_);
  io_uring_prep_timeout(s, &dial_timeout_, 0, 0);
  dial_timer_armed_ = true;
}

void RdmaTransport::on_dial_timeout(int res, uint32_t) {
  dial_timer_armed_ = false;
  if (res == -ECANCELED || closed_ || state_ == State::kEstablished) return;
  const char* phase = state_ == State::kResolvingAddress ? "address resolution"
                      : state_ == State::kResolvingRoute ? "route resolution"
                                                         : "the RDMA CM handshake";
  fail(Loss::kIoError, std::string("the RDMA connect did not complete within ") + std::to_string(dial_deadline_ms()) +
                           " ms (tunnel.connect_timeout_ms, at least 10 s; stuck in " + phase + ")");
}

IoPtr<RdmaTransport> RdmaTransport::accept(EventLoop& loop, RdmaContext& ctx, IncomingConnect connect,
                                           const void* private_data, size_t private_len, uint32_t max_data,
                                           Observer* observer, std::string* error) {
  ConnectParams params;
  const char* reason = "";
  if (!decode_connect_params(private_data, private_len, &params, &reason)) {
    *error = std::string("connect request without valid rdmagw parameters (not an rdmagw peer?): ") + reason;
    return nullptr;  // `connect` rejects it
  }
  auto t = make_io<RdmaTransport>(loop, ctx, max_data, observer);
  rdma_cm_id* id = connect.id();
  t->hold(connect.release_slot());
  t->id_ = connect.release_id();
  t->channel_ = connect.release_channel();
  id->context = t.get();
  sockaddr* peer = rdma_get_peer_addr(id);
  t->remote_ = "rdma:" + sockaddr_to_string(peer, sizeof(sockaddr_storage));
  t->peer_recv_depth_ = params.recv_depth;
  t->peer_buffer_size_ = params.buffer_size;
  t->state_ = State::kConnecting;
  // A peer that has not authenticated gets a few receives, enough for its
  // handshake (it sends at most three messages before our HELLO); the rest
  // are posted when it is admitted, before our HELLO goes out.
  if (!t->setup_qp(std::min(t->config_.recv_depth, kHandshakeReceives), error)) {
    rdma_reject(id, nullptr, 0);
    t->observer_ = nullptr;
    t->close(tunnel::CloseMode::kAbort);
    return nullptr;
  }
  uint8_t mine[kConnectParamsMaxSize];
  size_t mine_len =
      encode_connect_params(mine, {t->config_.recv_depth, static_cast<uint32_t>(t->pool_.buffer_size()), std::nullopt});
  rdma_conn_param param{};
  param.private_data = mine;
  param.private_data_len = static_cast<uint8_t>(mine_len);
  param.responder_resources = 0;  // no RDMA READ from the peer
  param.initiator_depth = 0;
  if (rdma_accept(id, &param) != 0) {
    *error = std::string("rdma_accept: ") + strerror(errno);
    t->observer_ = nullptr;
    t->close(tunnel::CloseMode::kAbort);
    return nullptr;
  }
  t->arm_cm_poll();
  return t;
}

bool RdmaTransport::setup_qp(uint32_t receives, std::string* error) {
  device_ = ctx_.device(id_->verbs, error);
  if (!device_) return false;
  comp_channel_ = ibv_create_comp_channel(id_->verbs);
  if (!comp_channel_ || !set_nonblocking(comp_channel_->fd)) {
    *error = std::string("ibv_create_comp_channel: ") + strerror(errno);
    return false;
  }
  int cqe = static_cast<int>(config_.send_depth + config_.recv_depth);
  cq_ = ibv_create_cq(id_->verbs, cqe, this, comp_channel_, 0);
  if (!cq_) {
    *error = "ibv_create_cq(" + std::to_string(cqe) + "): " + strerror(errno);
    return false;
  }
  ibv_qp_init_attr attr;
  if (!make_qp_init_attr(config_, device_->limits, cq_, &attr, error)) return false;
  if (rdma_create_qp(id_, device_->pd, &attr) != 0) {
    *error = std::string("rdma_create_qp: ") + strerror(errno);
    return false;
  }
  max_inline_ = attr.cap.max_inline_data;  // what the device granted, possibly less
  max_send_sge_ = std::max<uint32_t>(1, std::min<uint32_t>(attr.cap.max_send_sge, kErdmaMaxSendSge));
  // One header slot per send that can be in flight.
  send_slots_ = std::min<uint32_t>(config_.send_depth, static_cast<uint32_t>(pool_.buffer_size() / kSlotSize));
  header_slots_ = pool_.acquire();
  if (!header_slots_) {
    *error = "out of slab buffers (tunnel.rdma.slab_size)";
    return false;
  }
  slot_payload_.assign(send_slots_, 0);
  recv_buffers_.assign(config_.recv_depth, nullptr);
  if (!post_receives(receives, error)) return false;
  if (ibv_req_notify_cq(cq_, 0) != 0) {
    *error = std::string("ibv_req_notify_cq: ") + strerror(errno);
    return false;
  }
  arm_cq_poll();
  return true;
}

bool RdmaTransport::post_receives(uint32_t count, std::string* error) {
  for (; posted_receives_ < count; ++posted_receives_) {
    uint32_t i = posted_receives_;
    recv_buffers_[i] = pool_.acquire();
    if (!recv_buffers_[i]) {
      *error = "out of slab buffers for " + std::to_string(config_.recv_depth) +
               " receives (tunnel.rdma.slab_size too small for this many sessions)";
      return false;
    }
    if (!post_recv(i)) {
      *error = std::string("ibv_post_recv: ") + strerror(errno);
      return false;
    }
  }
  return true;
}

bool RdmaTransport::post_recv(uint32_t index) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(recv_buffers_[index]);
  sge.length = static_cast<uint32_t>(pool_.buffer_size());
  sge.lkey = device_->mr->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(id_->qp, &wr, &bad) == 0;
}

void RdmaTransport::arm_cm_poll() {
  if (cm_armed_ || closed_) return;
  io_uring_sqe* s = loop().sqe(&cm_op_);
  io_uring_prep_poll_add(s, channel_->fd, POLLIN);
  cm_armed_ = true;
}

void RdmaTransport::arm_cq_poll() {
  if (cq_armed_ || closed_) return;
  io_uring_sqe* s = loop().sqe(&cq_op_);
  io_uring_prep_poll_add(s, comp_channel_->fd, POLLIN);
  cq_armed_ = true;
}

void RdmaTransport::abandon() { observer_ = nullptr; }

// --- connection management (RDMA CM) -------------------------------------------

void RdmaTransport::on_cm_ready(int, uint32_t) {
  cm_armed_ = false;
  for (int i = 0; i < 64 && !closed_; ++i) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(channel_, &ev) != 0) break;  // EAGAIN: drained
    rdma_cm_event_type type = ev->event;
    int status = ev->status;
    uint8_t data[64] = {};
    size_t len = std::min<size_t>(ev->param.conn.private_data_len, sizeof(data));
    if (ev->param.conn.private_data && len) std::memcpy(data, ev->param.conn.private_data, len);
    // Acknowledge first: destroying the id later waits for every ack.
    rdma_ack_cm_event(ev);
    handle_cm_event(type, status, data, len);
  }
  arm_cm_poll();
}

void RdmaTransport::handle_cm_event(rdma_cm_event_type type, int status, const void* data, size_t len) {
  switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      state_ = State::kResolvingRoute;
      if (rdma_resolve_route(id_, static_cast<int>(timeout_ms_)) != 0)
        fail(Loss::kIoError, std::string("rdma_resolve_route: ") + strerror(errno));
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      std::string error;
      if (!setup_qp(config_.recv_depth, &error)) {
        fail(Loss::kLocalError, error);
        return;
      }
      uint8_t mine[kConnectParamsMaxSize];
      size_t mine_len =
          encode_connect_params(mine, {config_.recv_depth, static_cast<uint32_t>(pool_.buffer_size()), session_});
      rdma_conn_param param{};
      param.private_data = mine;
      param.private_data_len = static_cast<uint8_t>(mine_len);
      param.retry_count = 7;
      param.rnr_retry_count = 0;  // credits make RNR impossible; iWARP has none anyway
      state_ = State::kConnecting;
      if (rdma_connect(id_, &param) != 0) fail(Loss::kIoError, std::string("rdma_connect: ") + strerror(errno));
      return;
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
      if (peer_recv_depth_ == 0) {  // active side: the acceptor's parameters
        ConnectParams params;
        const char* reason = "";
        if (!decode_connect_params(data, len, &params, &reason)) {
          fail(Loss::kProtocolError, std::string("peer accepted without valid rdmagw parameters: ") + reason);
          return;
        }
        peer_recv_depth_ = params.recv_depth;
        peer_buffer_size_ = params.buffer_size;
      }
      credits_ = RdmaCredits(peer_recv_depth_, config_.recv_depth);
      state_ = State::kEstablished;
      if (dial_timer_armed_) loop().cancel(&dial_timer_op_);
      if (observer_) {
        Observer* o = observer_;
        observer_ = nullptr;
        o->on_rdma_established(this);
      }
      return;
    }
    case RDMA_CM_EVENT_DISCONNECTED:
      // The CM event and the last messages' completions come through
      // different channels: take in what already arrived (a peer that
      // closed cleanly flushed its last frames first), then end.
      peer_disconnected_ = true;
      if (sink_) drain_cq();
      fail(Loss::kPeerClosed, "peer disconnected");
      return;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return;
    case RDMA_CM_EVENT_REJECTED:
      rejected_ = true;
      fail(Loss::kPeerClosed, "connection rejected by the peer (" + reject_text(status) + ")");
      return;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      // The device is going away (an interface reset, a driver unload): the
      // kernel waits until every resource on it is freed, which closing
      // this transport does, and no new transport will use it.
      ctx_.device_removed(device_);
      fail(Loss::kDeviceRemoved, "RDMA device removed");
      return;
    default:
      fail(Loss::kIoError, std::string(rdma_event_str(type)) + " (" + cm_status_text(status) + ")");
      return;
  }
}

void RdmaTransport::fail(Loss loss, std::string reason) {
  if (closed_) return;
  if (observer_) {
    Observer* o = observer_;
    observer_ = nullptr;
    o->on_rdma_failed(this, reason);
  } else if (sink_) {
    tunnel::TransportSink* s = sink_;
    sink_ = nullptr;
    s->on_transport_closed(loss, reason);
  }
  close(tunnel::CloseMode::kAbort);
}

void RdmaTransport::close(tunnel::CloseMode mode) {
  if (closed_) return;
  bool flush_first = mode == tunnel::CloseMode::kFlush;
  sink_ = nullptr;
  observer_ = nullptr;
  if (flushing_on_close_) {
    if (!flush_first) finish_close();  // a failure during the flush ends it
    return;
  }
  if (flush_first && state_ == State::kEstablished && (!outbound_.empty() || sends_in_flight_ > 0)) {
    // Like the TCP transport: a session that ends cleanly (drained, shut
    // down) still delivers what it queued, such as the last FINs, or the
    // peer would see its streams reset rather than closed.
    flushing_on_close_ = true;
    flush();
    flush_timeout_.tv_sec = tunnel::kCloseFlushSeconds;
    io_uring_sqe* s = loop().sqe(&flush_timer_op_);
    io_uring_prep_timeout(s, &flush_timeout_, 0, 0);
    flush_timer_armed_ = true;
    return;
  }
  finish_close();
}

void RdmaTransport::on_flush_timeout(int, uint32_t) {
  flush_timer_armed_ = false;
  if (flushing_on_close_) {
    log::warn("rdma_flush_timeout").kv("remote", remote_).kv("unsent_bytes", outbound_.size());
    finish_close();
  }
}

void RdmaTransport::finish_close() {
  if (closed_) return;
  flushing_on_close_ = false;
  closed_ = true;
  if (flush_timer_armed_) loop().cancel(&flush_timer_op_);
  if (dial_timer_armed_) loop().cancel(&dial_timer_op_);
  if (id_ && state_ == State::kEstablished) rdma_disconnect(id_);
  state_ = State::kClosed;
  // Destroying the QP guarantees no more DMA into our buffers; they return to
  // the pool in the destructor.
  if (id_ && id_->qp) rdma_destroy_qp(id_);
  if (cm_armed_) loop().cancel(&cm_op_);
  if (cq_armed_) loop().cancel(&cq_op_);
}

// --- data path -----------------------------------------------------------------

void RdmaTransport::start(tunnel::TransportSink* sink) {
  sink_ = sink;
  // The peer may have sent before we saw ESTABLISHED (the dialer speaks
  // first); those completions waited in the CQ for a sink.
  drain_cq();
  request_send();
}

void RdmaTransport::request_send() {
  if (!closed_) loop().request_flush(this);
}

void RdmaTransport::on_cq_ready(int, uint32_t) {
  cq_armed_ = false;
  if (!closed_) {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    unsigned events = 0;
    while (ibv_get_cq_event(comp_channel_, &cq, &ctx) == 0) ++events;
    if (events) ibv_ack_cq_events(cq_, events);
    // Re-arm before draining: a completion after the drain then still
    // raises an event, so none is ever missed. Until a session is attached,
    // completions stay in the CQ; start() drains them.
    ibv_req_notify_cq(cq_, 0);
    if (sink_ || flushing_on_close_) drain_cq();
    if (!closed_ && sink_ && config_.busy_poll_us > 0) {
      auto until = Clock::now() + std::chrono::microseconds(config_.busy_poll_us);
      while (!closed_ && Clock::now() < until) drain_cq();
    }
    if (!closed_) request_send();
    // Flushing on close: done once every queued byte was sent and completed.
    if (flushing_on_close_ && outbound_.empty() && sends_in_flight_ == 0) finish_close();
  }
  arm_cq_poll();
}

void RdmaTransport::drain_cq() {
  ibv_wc wcs[32];
  for (int round = 0; round < 64 && !closed_; ++round) {
    int n = ibv_poll_cq(cq_, 32, wcs);
    if (n < 0) {
      fail(Loss::kIoError, "ibv_poll_cq failed");
      return;
    }
    for (int i = 0; i < n && !closed_; ++i) handle_completion(wcs[i]);
    if (n < 32) return;
  }
}

void RdmaTransport::handle_completion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) {
    bool retries = wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR;
    fail(retries ? Loss::kRetryExceeded : Loss::kCompletionError,
         std::string("work completion error: ") + ibv_wc_status_str(wc.status));
    return;
  }
  ++completions_;
  metrics::WorkerMetrics* counters = ctx_.metrics();
  if (counters) (wc.wr_id & kSendTag ? counters->rdma_send_completions : counters->rdma_recv_completions).add();
  if (wc.wr_id & kSendTag) {
    uint32_t slot = static_cast<uint32_t>(wc.wr_id & ~kSendTag);
    uint32_t bytes = slot_payload_[slot];
    if (slot < slot_sealed_.size() && slot_sealed_[slot]) {
      pool_.release(slot_sealed_[slot]);
      slot_sealed_[slot] = nullptr;
    }
    // RC completes sends in order, so these are the oldest bytes posted.
    outbound_.consume(bytes);
    posted_bytes_ -= bytes;
    --sends_in_flight_;
    return;
  }
  on_message(static_cast<uint32_t>(wc.wr_id), wc.byte_len);
}

void RdmaTransport::on_message(uint32_t index, uint32_t length) {
  if (index >= recv_buffers_.size()) {
    fail(Loss::kProtocolError, "completion for an unknown receive");
    return;
  }
  uint8_t* buf = recv_buffers_[index];
  if (length < kRdmaHeaderSize) {
    fail(Loss::kProtocolError, "protocol error: message shorter than its header");
    return;
  }
  if (opener_) {
    // Sealed: opened in place, the header checked with it.
    if (length < kRdmaHeaderSize + tunnel::kCipherTagSize ||
        !opener_->open(std::span<const uint8_t>(buf + kRdmaHeaderSize, length - kRdmaHeaderSize),
                       std::span<const uint8_t>(buf, kRdmaHeaderSize), buf + kRdmaHeaderSize)) {
      const char* why = "a message does not authenticate (altered, replayed, reordered or not from our peer)";
      if (admitted()) log::warn("session_error").kv("remote", remote_).kv("reason", why);
      fail(Loss::kProtocolError, std::string("protocol error: ") + why);
      return;
    }
    length -= static_cast<uint32_t>(tunnel::kCipherTagSize);
  }
  uint32_t returned = tunnel::get_u32(buf);
  if (tunnel::get_u32(buf + 4) != 0 || !credits_.on_receive(returned)) {
    // Before admission the session's close line says it, rate-limited.
    if (admitted())
      log::warn("session_error").kv("remote", remote_).kv("reason", "malformed frame: bad RDMA transport header");
    fail(Loss::kProtocolError,
         "protocol error: bad transport header (returned " + std::to_string(returned) + " credits)");
    return;
  }
  // A message holds whole frames. Without a session (flushing on close)
  // frames are dropped, but the receive is still re-posted below: the
  // credits it returns keep the peer able to tell us about the receives our
  // flush uses.
  struct Policy {
    RdmaTransport& t;
    bool closed() const { return t.closed_; }
    void on_header(const tunnel::FrameHeader&) {}
    bool after_frame() const { return true; }
    bool after_refusal() const { return t.flushing_on_close_; }
  } policy{*this};
  tunnel::Delivery d =
      tunnel::deliver_frames(reader_, {buf + kRdmaHeaderSize, length - kRdmaHeaderSize}, sink_, policy);
  if (d.end == tunnel::Delivery::End::kShort || d.end == tunnel::Delivery::End::kMalformed) {
    std::string reason = d.end == tunnel::Delivery::End::kShort ? "frame cut at the end of a message" : d.reason;
    if (admitted()) log::warn("session_error").kv("remote", remote_).kv("reason", "malformed frame: " + reason);
    fail(Loss::kProtocolError, "protocol error: " + reason);
    return;
  }
  if (d.end == tunnel::Delivery::End::kRefused) return;
  if (closed_ || (!sink_ && !flushing_on_close_)) return;
  if (post_all_receives_) {
    // Admitted by a frame of this message: the rest of our receives.
    post_all_receives_ = false;
    std::string error;
    if (!post_receives(config_.recv_depth, &error)) {
      log::warn("session_error").kv("remote", remote_).kv("reason", error);
      fail(Loss::kLocalError, error);
      return;
    }
  }
  // The frames' payloads were handed on (copied into stream queues or
  // written to sockets): the buffer can take the next message.
  if (!post_recv(index)) {
    // After the peer's disconnect the QP is in error and takes no receives;
    // the messages still in the CQ are what matters then.
    if (!peer_disconnected_) fail(Loss::kIoError, std::string("ibv_post_recv: ") + strerror(errno));
    return;
  }
  credits_.on_repost();
}

void RdmaTransport::flush() {
  if (closed_ || state_ != State::kEstablished || (!sink_ && !flushing_on_close_)) return;
  while (sends_in_flight_ < send_slots_) {
    bool has_data = outbound_.size() > posted_bytes_;
    if (has_data && credits_.can_send_data()) {
      if (!post_message(true)) return;
    } else if (credits_.should_send_update() && admitted()) {
      // (Not before admission: the peer's switch to sealed messages is
      // tied to frames, and a peer that proved nothing needs no credit.)
      // The reserved credits exist for exactly this: returning credits.
      if (!post_message(false)) return;
    } else {
      return;
    }
  }
}

bool RdmaTransport::addresses(IpBytes* local, IpBytes* remote) const {
  if (!id_) return false;
  sockaddr* a = rdma_get_local_addr(id_);
  sockaddr* b = rdma_get_peer_addr(id_);
  return a && b && ip_bytes_of(a, sizeof(sockaddr_storage), local) && ip_bytes_of(b, sizeof(sockaddr_storage), remote);
}

bool RdmaTransport::protect(const tunnel::CipherKey& send, const tunnel::CipherKey& receive,
                            tunnel::Protection protection, std::string* error) {
  sealer_ = tunnel::FrameCipher::create(send, tunnel::FrameCipher::Use::kSeal, protection, error);
  opener_ =
      sealer_ ? tunnel::FrameCipher::create(receive, tunnel::FrameCipher::Use::kOpen, protection, error) : nullptr;
  if (!opener_) {
    sealer_.reset();
    return false;
  }
  slot_sealed_.assign(send_slots_, nullptr);
  plain_unposted_ = outbound_.size() - posted_bytes_;  // what is queued already goes out as it is
  return true;
}

bool RdmaTransport::post_message(bool with_data) {
  uint32_t slot = static_cast<uint32_t>(send_seq_ % send_slots_);
  uint8_t* header = header_slots_ + slot * kSlotSize;
  tunnel::put_u32(header, credits_.pending_returns());
  tunnel::put_u32(header + 4, 0);
  if (sealer_ && (plain_unposted_ == 0 || !with_data)) return post_sealed(with_data, slot, header);
  uint32_t lkey = device_->mr->lkey;
  ibv_sge sges[kErdmaMaxSendSge];
  sges[0] = {reinterpret_cast<uintptr_t>(header), kRdmaHeaderSize, lkey};
  int nsge = 1;
  size_t room = peer_buffer_size_ - kRdmaHeaderSize;
  if (sealer_) room = std::min(room, plain_unposted_);  // plain bytes only: they end on a frame
  uint32_t payload = 0;
  if (with_data) {
    iovec iov[kErdmaMaxSendSge];
    int max_pieces = static_cast<int>(max_send_sge_) - 1;
    int n = outbound_.iovecs_at(posted_bytes_, iov, max_pieces);
    PackedPiece pieces[kErdmaMaxSendSge];
    int count = pack_frames(iov, n, room, max_pieces, pieces, &payload);
    for (int i = 0; i < count; ++i)
      sges[nsge++] = {reinterpret_cast<uintptr_t>(pieces[i].data), pieces[i].length, lkey};
    if (payload == 0) {
      fail(Loss::kLocalError, "internal error: a queued frame does not fit the peer's receive buffer");
      return false;
    }
  }
  ibv_send_wr wr{};
  wr.wr_id = kSendTag | slot;
  wr.sg_list = sges;
  wr.num_sge = nsge;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (kRdmaHeaderSize + payload <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) {
    fail(Loss::kIoError, std::string("ibv_post_send: ") + strerror(errno));
    return false;
  }
  credits_.on_send();  // the header carried every pending return
  slot_payload_[slot] = payload;
  posted_bytes_ += payload;
  if (sealer_) plain_unposted_ -= std::min<size_t>(plain_unposted_, payload);
  ++send_seq_;
  ++sends_in_flight_;
  return true;
}

bool RdmaTransport::post_sealed(bool with_data, uint32_t slot, uint8_t* header) {
  uint8_t* message = pool_.acquire();
  if (!message) {
    // Sends in flight give theirs back on completion; with none, nothing would.
    if (sends_in_flight_ == 0)
      fail(Loss::kLocalError, "out of slab buffers for a sealed message (tunnel.rdma.slab_size)");
    return false;
  }
  size_t size = std::min<size_t>(peer_buffer_size_, pool_.buffer_size());
  size_t room = size - kRdmaHeaderSize - tunnel::kCipherTagSize;
  std::memcpy(message, header, kRdmaHeaderSize);
  // The CPU gathers the frames, so the SGE limit does not bound the pieces.
  constexpr int kMaxPieces = 16;
  iovec iov[kMaxPieces];
  PackedPiece pieces[kMaxPieces];
  uint32_t payload = 0;
  int count = 0;
  if (with_data) {
    int n = outbound_.iovecs_at(posted_bytes_, iov, kMaxPieces);
    count = pack_frames(iov, n, room, kMaxPieces, pieces, &payload);
    if (payload == 0) {
      pool_.release(message);
      fail(Loss::kLocalError, "internal error: a queued frame does not fit the peer's receive buffer");
      return false;
    }
    for (int i = 0; i < count; ++i) iov[i] = {const_cast<uint8_t*>(pieces[i].data), pieces[i].length};
  }
  if (!sealer_->seal(std::span<const iovec>(iov, static_cast<size_t>(count)),
                     std::span<const uint8_t>(message, kRdmaHeaderSize), message + kRdmaHeaderSize)) {
    pool_.release(message);
    fail(Loss::kLocalError, "sealing a record failed (OpenSSL)");
    return false;
  }
  uint32_t length = static_cast<uint32_t>(kRdmaHeaderSize + payload + tunnel::kCipherTagSize);
  ibv_sge sge{reinterpret_cast<uintptr_t>(message), length, device_->mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = kSendTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (length <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) {
    pool_.release(message);
    fail(Loss::kIoError, std::string("ibv_post_send: ") + strerror(errno));
    return false;
  }
  credits_.on_send();
  slot_sealed_[slot] = message;
  slot_payload_[slot] = payload;
  posted_bytes_ += payload;
  ++send_seq_;
  ++sends_in_flight_;
  return true;
}

}  // namespace rdmagw::transport

namespace rdmagw::transport {

void RdmaTransport::describe(tunnel::SessionInfo* out) const {
  out->has_rdma = true;
  out->qp_state = "none";
  if (id_ && id_->qp) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(id_->qp, &attr, IBV_QP_STATE, &init) == 0) {
      static const char* const kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
      out->qp_state = attr.qp_state <= IBV_QPS_ERR ? kNames[attr.qp_state] : "UNKNOWN";
    } else {
      out->qp_state = "query-failed";
    }
  }
  out->send_credits = credits_.available();
  out->peer_recv_depth = peer_recv_depth_;
  out->pending_returns = credits_.pending_returns();
  out->sends_in_flight = sends_in_flight_;
  out->completions = completions_;
}

}  // namespace rdmagw::transport
