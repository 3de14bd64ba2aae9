// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tunnel frames over one RC queue pair, connected through RDMA CM.
//
// Each SEND carries an 8-byte transport header (credits returned, reserved)
// followed by whole frames, gathered with up to 5 more SGEs straight from the
// slab buffers the frames were built in (no copy). The receiver keeps
// recv_depth slab buffers posted; each SEND consumes one, so a sender may only
// send while it holds a credit (iWARP has no RNR retry). Credits come back in
// the header of every message, or in a header-only message once half the
// receives are used; two credits are kept for such updates so that neither
// side can end up unable to return credits. Completions arrive through the CQ's
// completion channel, whose fd the worker's io_uring polls.
//
// Encrypted (tunnel.auth.encrypt), each message after the handshake is
// sealed whole: the header authenticated, the frames encrypted into a slab
// buffer of its own, then the tag (docs/rdma.md); the receiver opens it in
// place in its receive buffer.
//
// Why one class of this size (about 35 methods): the Transport seam's
// contract, RDMA CM's events, the queue pair's send and receive queues,
// credits and sealing all act on one QP whose errors end all of them.
// What stands alone is outside: the device and budget (RdmaContext), the
// credit arithmetic (rdma_credits.h), the connect (RdmaConnector).
#include <infiniband/verbs.h>
#include <linux/time_types.h>
#include <rdma/rdma_cma.h>

#include <optional>
#include <string>
#include <vector>

#include "common/address.h"
#include "common/byte_queue.h"
#include "proxy/io/event_loop.h"
#include "proxy/transport/rdma/incoming_connect.h"
#include "proxy/transport/rdma/rdma_context.h"
#include "proxy/transport/rdma/rdma_credits.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::transport {

inline constexpr size_t kRdmaHeaderSize = 8;
// Receives an accepted QP posts before its peer is admitted.
inline constexpr uint32_t kHandshakeReceives = 4;

class RdmaTransport final : public tunnel::Transport, public Flushable {
 public:
  class Observer {
   public:
    virtual ~Observer() = default;
    virtual void on_rdma_established(RdmaTransport* transport) = 0;
    // Connection setup failed; the transport closes itself after this returns
    // (its owner then lets go of it).
    virtual void on_rdma_failed(RdmaTransport* transport, std::string_view reason) = 0;
  };
  // The peer rejected the connect (nothing listens there, or it refused us).
  bool rejected() const { return rejected_; }

  // Active side: resolves and connects to `peer` (its address and rdma_port).
  // A failure detected at once returns nullptr with *error set (the observer
  // is not called); later ones go to the observer.
  // `session`: the session it resumes, named in the connect's private data
  // so that the peer's listener hands it to the worker holding the session.
  // `source`: the local address to connect from (null: the route's).
  static IoPtr<RdmaTransport> dial(EventLoop& loop, RdmaContext& ctx, const Endpoint& peer, uint32_t max_data,
                                   uint32_t timeout_ms, const tunnel::SessionToken* session, Observer* observer,
                                   std::string* error, const Endpoint* source = nullptr);
  // Passive side: `id` is from an acknowledged CONNECT_REQUEST.
  static IoPtr<RdmaTransport> accept(EventLoop& loop, RdmaContext& ctx, IncomingConnect connect,
                                     const void* private_data, size_t private_len, uint32_t max_data,
                                     Observer* observer, std::string* error);
  RdmaTransport(EventLoop& loop, RdmaContext& ctx, uint32_t max_data, Observer* observer);

  tunnel::TransportKind kind() const override { return tunnel::TransportKind::kRdma; }
  void start(tunnel::TransportSink* sink) override;
  void rebind(tunnel::TransportSink* sink) override { sink_ = sink; }
  tunnel::Outbound& outbound() override { return outbound_; }
  void request_send() override;
  // With kFlush, frames already queued (and credits permitting) still go
  // out, and the QP stays up until their sends complete, for at most kCloseFlushSeconds.
  void close(tunnel::CloseMode mode) override;
  std::string remote_address() const override { return remote_; }
  void describe(tunnel::SessionInfo* out) const override;
  void flush() override;
  // Setup ends without telling the observer (the dial or accept was dropped).
  void abandon();

 private:
  enum class State { kResolvingAddress, kResolvingRoute, kConnecting, kEstablished, kClosed };
  ~RdmaTransport() override;

  bool open_channel(std::string* error);
  // Creates the QP and posts the first `receives` receive buffers.
  bool setup_qp(uint32_t receives, std::string* error);
  // Posts receive buffers until `count` are (an accepted QP: the rest once admitted).
  bool post_receives(uint32_t count, std::string* error);
  bool post_recv(uint32_t index);
  void on_admitted() override { post_all_receives_ = true; }

 public:
  bool protect(const tunnel::CipherKey& send, const tunnel::CipherKey& receive, tunnel::Protection protection,
               std::string* error) override;
  bool addresses(IpBytes* local, IpBytes* remote) const override;

 private:
  // An encrypted message: | header (authenticated) | sealed frames | tag |,
  // built in a slab buffer of its own (kept until its send completes).
  bool post_sealed(bool with_data, uint32_t slot, uint8_t* header);
  void arm_cm_poll();
  void arm_cq_poll();
  void on_cm_ready(int res, uint32_t flags);
  void on_cq_ready(int res, uint32_t flags);
  void handle_cm_event(rdma_cm_event_type type, int status, const void* private_data, size_t len);
  void drain_cq();
  void handle_completion(const ibv_wc& wc);
  void on_message(uint32_t index, uint32_t length);
  bool post_message(bool with_data);
  using Loss = metrics::TransportLoss;
  void fail(Loss loss, std::string reason);
  // Tears the QP down; the owner retires the object (deleted once idle).
  void finish_close();
  void on_flush_timeout(int res, uint32_t flags);
  // The active side's whole connect (address, route, CM handshake) within
  // timeout_ms_: the CM's own REQ retries take minutes to give up.
  void arm_dial_timer();
  uint32_t dial_deadline_ms() const;
  void on_dial_timeout(int res, uint32_t flags);

  RdmaContext& ctx_;
  BufferPool& pool_;
  RdmaConfig config_;
  Observer* observer_;
  tunnel::TransportSink* sink_ = nullptr;
  tunnel::FrameReader reader_;
  State state_ = State::kResolvingAddress;
  bool closed_ = false;
  std::string remote_;
  uint32_t timeout_ms_ = 3000;
  std::optional<tunnel::SessionToken> session_;  // active side: named in the connect

  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  RdmaDeviceState* device_ = nullptr;
  ibv_comp_channel* comp_channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  uint32_t max_inline_ = 0;
  uint32_t max_send_sge_ = 1;

  IoOp cm_op_, cq_op_, flush_timer_op_, dial_timer_op_;
  bool cm_armed_ = false, cq_armed_ = false;
  bool dial_timer_armed_ = false;
  __kernel_timespec dial_timeout_{};
  // close(kFlush) with frames queued: the session is gone (sink_ is null) but
  // sends continue until outbound_ is empty or the timer fires.
  bool flushing_on_close_ = false;
  bool flush_timer_armed_ = false;
  bool peer_disconnected_ = false;  // taking in the last completions before failing
  __kernel_timespec flush_timeout_{};

  std::vector<uint8_t*> recv_buffers_;  // recv_depth; the first posted_receives_ are posted
  uint32_t posted_receives_ = 0;
  bool post_all_receives_ = false;      // admitted: post the rest after this message's frames
  uint8_t* header_slots_ = nullptr;     // one slab buffer cut into 16-byte header slots
  std::vector<uint32_t> slot_payload_;  // frame bytes each in-flight SEND carries
  uint64_t send_seq_ = 0;
  uint32_t sends_in_flight_ = 0;
  uint32_t send_slots_ = 0;
  RdmaCredits credits_;
  uint32_t peer_recv_depth_ = 0;
  uint32_t peer_buffer_size_ = 0;
  tunnel::Outbound outbound_;
  bool rejected_ = false;
  size_t posted_bytes_ = 0;  // outbound bytes handed to the QP, not yet completed
  // Encryption (tunnel.auth.encrypt), once the handshake turned it on.
  std::unique_ptr<tunnel::FrameCipher> sealer_, opener_;
  size_t plain_unposted_ = 0;          // queued before sealing began: goes out as it is
  std::vector<uint8_t*> slot_sealed_;  // per send slot: its sealed message's buffer
  uint64_t completions_ = 0;
};

}  // namespace rdmagw::transport
