// SPDX-License-Identifier: Apache-2.0
#pragma once
// The seam between the tunnel (frames, streams, flow control) and the byte
// carriers underneath. The tunnel knows transports only through this file:
// a Transport carries frames of one session; a Connector dials one; a
// TransportListener accepts them. TCP and RDMA implement all three
// (proxy/transport/), the runtime wires them up, unit tests fake them.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/address.h"
#include "common/byte_queue.h"
#include "common/metrics.h"
#include "common/unique_fd.h"
#include "proxy/io/io_object.h"
#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/frame_cipher.h"
#include "proxy/tunnel/handshake_budget.h"
#include "proxy/tunnel/outbound.h"
#include "proxy/tunnel/tunnel_info.h"

namespace rdmagw::tunnel {

enum class TransportKind : uint8_t { kTcp, kRdma };
std::string_view transport_kind_name(TransportKind kind);

// How a transport ends.
enum class CloseMode : uint8_t {
  kAbort,  // drop what is queued: errors, peers that misbehave
  kFlush,  // frames already queued still go out first, for at most
           // kCloseFlushSeconds: a session that ended cleanly (drained, shutting down)
};
// A peer that does not take our last frames cannot hold a closing transport
// (and its buffers) longer than this.
inline constexpr int kCloseFlushSeconds = 2;

// Implemented by the session: frames arrive here.
class TransportSink {
 public:
  virtual ~TransportSink() = default;
  // A whole, header-validated frame. Returns false when the session has
  // closed the transport (the transport then stops delivering).
  virtual bool on_frame(const FrameHeader& header, std::span<const uint8_t> payload) = 0;
  // The end of a batch of frames: their payloads are still where on_frame()
  // saw them, and stop being valid when this returns (the receive buffer is
  // reused). The session delivers the batch's stream data here, so that a
  // stream's frames of one batch leave in one write. Called on every sink
  // that took frames of the batch, unless it closed the transport (then it
  // delivered when it closed).
  virtual void on_frames_end() {}
  // Whether DATA may arrive through on_piped_frame() now (the session is
  // open); a transport that splices asks before each frame it would pipe.
  virtual bool takes_piped_frames() const { return false; }
  // A DATA frame whose payload is `head` (in the receive buffer, possibly
  // empty) followed by `piped` bytes in a pipe (common/splice_pipe.h). The
  // sink empties the pipe of them; the rest is as on_frame().
  virtual bool on_piped_frame(const FrameHeader& header, std::span<const uint8_t> head, int pipe_fd, uint32_t piped) {
    (void)header, (void)head, (void)pipe_fd, (void)piped;
    return false;
  }
  // The carrier failed or the peer closed it (`loss` says which way, for
  // the metrics; `reason` says it for the log). Called at most once.
  virtual void on_transport_closed(metrics::TransportLoss loss, std::string_view reason) = 0;
};

// What a transport keeps while it hands one receive's frames out: which
// sink took them, so that each hears of the batch's end
// (TransportSink::on_frames_end) before the buffer the payloads live in is
// reused. A resume rebinds mid-batch: the first sink hears of its part
// before the next one takes a frame. end() runs on destruction too.
class FrameBatch {
 public:
  FrameBatch() = default;
  FrameBatch(const FrameBatch&) = delete;
  FrameBatch& operator=(const FrameBatch&) = delete;
  ~FrameBatch() { end(); }
  // Before a frame goes to `sink`.
  void feed(TransportSink* sink) {
    if (fed_ && fed_ != sink) fed_->on_frames_end();
    fed_ = sink;
  }
  // The sink refused the frame: it closed the transport, and delivered then.
  void refused() { fed_ = nullptr; }
  void end() {
    if (TransportSink* sink = std::exchange(fed_, nullptr)) sink->on_frames_end();
  }

 private:
  TransportSink* fed_ = nullptr;
};

// A connection handed to another worker (Transport::hand_off): its socket,
// and on an encrypted transport its ciphers, whose record counts go on.
struct MovedConnection {
  UniqueFd fd;
  std::shared_ptr<FrameCipher> sealer, opener;
};

// An IoObject: its owner (the session) retires it after close().
class Transport : public IoObject {
 public:
  virtual TransportKind kind() const = 0;
  // Starts delivering frames to `sink`, and sending what outbound() holds:
  // the handshake's frames, then the session's once it attaches its queue.
  virtual void start(TransportSink* sink) = 0;
  // Frames go to `sink` from now on, the next one of this batch included:
  // the acceptor hands a transport that resumes a session to that session.
  virtual void rebind(TransportSink* sink) = 0;
  // What this transport sends; owned by it, so that its handshake buffers
  // stay alive while a send is in flight, even past close().
  virtual Outbound& outbound() = 0;
  // New bytes are queued; they leave at the end of this loop batch.
  virtual void request_send() = 0;
  // Stops all I/O (kFlush: after the queued frames). The sink is never
  // called again.
  virtual void close(CloseMode mode) = 0;
  virtual std::string remote_address() const = 0;
  // Gives up the connection itself, for another worker to carry on with:
  // stops delivering frames now, and calls `done` with the socket once no
  // operation uses it (within this batch or the next). Only for a transport
  // whose peer waits for an answer, so that no byte is in flight. False
  // when this kind of transport cannot move (RDMA: its QP belongs to this
  // worker's device context).
  virtual bool hand_off(std::function<void(MovedConnection)>) { return false; }
  // After an authenticated handshake (docs/protocol.md, "Protected
  // records"), called while a frame is being delivered: bytes queued to send
  // from now on go in records sealed with `send`, and bytes received after
  // that frame are opened with `receive` (authenticated, and with kEncrypt
  // encrypted). False (with *error) when this transport cannot.
  virtual bool protect(const CipherKey&, const CipherKey&, Protection, std::string* error) {
    *error = "this transport cannot protect its records";
    return false;
  }
  // This connection's ends as IP addresses: `local` is ours, `remote` the
  // peer's. Authentication binds the proofs to the acceptor's address as the
  // dialer dialed it (the dialer's `remote`, the acceptor's `local`). False
  // if the transport cannot tell.
  virtual bool addresses(IpBytes* local, IpBytes* remote) const {
    (void)local;
    (void)remote;
    return false;
  }
  // Fills in what this carrier knows beyond the session (RDMA: QP, credits).
  virtual void describe(SessionInfo*) const {}

  // Until the session admits its peer (the peer authenticated, or without
  // tunnel.auth sent a valid HELLO), a transport holds a handshake slot and
  // as little memory as the handshake needs: a peer that proves nothing
  // costs a few KiB, not a session's buffers (TCP: a small receive buffer;
  // RDMA, accepting: a few posted receives). Admission gives the slot back
  // and lets the transport take its full buffers, before the session sends
  // anything that lets the peer go on.
  void admit() {
    if (admitted_) return;
    admitted_ = true;
    handshake_slot_.release();
    on_admitted();
  }
  bool admitted() const { return admitted_; }
  // An accepted connection's slot, held until admission or destruction.
  void hold(HandshakeSlot slot) { handshake_slot_ = std::move(slot); }

 protected:
  using IoObject::IoObject;
  virtual void on_admitted() {}

 private:
  HandshakeSlot handshake_slot_;
  bool admitted_ = false;
};

// Told how a dial ended; exactly one of the two, unless the Dial was
// destroyed first (then neither).
class DialObserver {
 public:
  virtual ~DialObserver() = default;
  virtual void on_dialed(IoPtr<Transport> transport) = 0;
  // `refused`: the peer's host answered that nothing listens there (its
  // rdmagw is not running), as opposed to a timeout or an unreachable host.
  virtual void on_dial_failed(std::string_view reason, bool refused) = 0;
};

// A connection attempt in progress. Destroying it cancels the attempt.
class Dial {
 public:
  virtual ~Dial() = default;
};

// Dials the peer sidecar over one kind of transport.
class Connector {
 public:
  virtual ~Connector() = default;
  virtual TransportKind kind() const = 0;
  // Starts a dial to `peer` (address and this transport's port). Returns
  // nullptr with *error set when it fails at once (the observer is not called).
  // `session`: the session the transport is for when it resumes one (null
  // for a new one). The peer's RDMA listener hands the connection to the
  // worker holding that session, since a QP cannot move between workers
  // once it exists; TCP has no need (its socket moves, Transport::hand_off).
  virtual std::unique_ptr<Dial> dial(const Endpoint& peer, uint32_t timeout_ms, const SessionToken* session,
                                     DialObserver* observer, std::string* error) = 0;
};

// Handed every transport a peer dialed to us, once it can carry frames.
class InboundObserver {
 public:
  virtual ~InboundObserver() = default;
  virtual void on_inbound(IoPtr<Transport> transport) = 0;
};

// Accepts transports on one kind of tunnel port.
class TransportListener {
 public:
  virtual ~TransportListener() = default;
  virtual TransportKind kind() const = 0;
  virtual void start(InboundObserver* observer) = 0;
  // Accepts no more (drain); connections being set up are dropped.
  virtual void stop() = 0;
  // Called every worker tick (retries after resource errors such as EMFILE).
  virtual void tick() {}
};

}  // namespace rdmagw::tunnel
