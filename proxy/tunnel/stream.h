// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tunnel half of a stream: its id on the session carrying it, its flow
// control windows in both directions and how far its FINs went. The local
// layer's stream object derives from it, so one object owns all of a
// stream's state; the session only holds a pointer per id (to route frames)
// and the stream holds a handle to its session, which may come and go under
// it (Session::detach).
//
// Re-entrance rule: a session calls on_peer_data() at the end of a
// transport's batch of frames (and before it lets the transport go), and a
// stream must not call its session from there. Every other hook runs after
// the batch, when the session is neither parsing nor delivering, and may
// call the session freely.
#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/stream_window.h"

namespace rdmagw::tunnel {

class Session;

class Stream {
 public:
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  uint32_t stream_id() const { return id_; }     // 0 before it was opened
  Session* session() const { return session_; }  // null while detached
  bool fin_sent() const { return fin_sent_; }
  // The peer's FIN arrived: set while the session parses, before
  // on_peer_fin() is called at the end of the batch.
  bool fin_received() const { return fin_received_; }
  // The peer's FIN arrived and nothing the session parsed after it for this
  // stream waits to be dispatched: what a stream may act on. A RESET parsed
  // behind the FIN in the same batch is dispatched first (and wins), so a
  // stream must not finish cleanly on the FIN before it.
  bool peer_fin_settled() const { return fin_received_ && !(events_ & (kEventFinBit | kEventResetBit)); }
  // Both FINs crossed the tunnel: nothing more is owed to or by the session.
  bool tunnel_done() const { return fin_sent_ && fin_received_; }
  // Why it may not send (GET /streams): bytes of stream credit left, and
  // whether it waits for the peer's WINDOW or for session credit.
  uint64_t send_credit() const { return send_.available(); }
  bool waits_for_window() const { return wants_credit_; }
  bool waits_for_session_credit() const { return waits_for_session_; }

  // What on_peer_data() did with the bytes it was handed.
  struct Delivery {
    bool accepted = true;    // false: no room to keep them (the session resets the stream)
    uint32_t delivered = 0;  // written to the local socket already (the rest is kept)
  };

 protected:
  Stream() = default;
  virtual ~Stream() = default;
  // A stream a takeover rebuilt without a session (its session had ended
  // after both FINs crossed): whether the peer's FIN had arrived. One with
  // a session gets its state from Session::restore_stream.
  void restore_peer_fin(bool received) { fin_received_ = received; }

  // Payload from the peer: every DATA (and OPEN) payload of one transport
  // batch for this stream, in order, as pieces of the transport's receive
  // buffer (so that one sendmsg can take them all). The bytes live only
  // during the call, and the stream must not call its session.
  virtual Delivery on_peer_data(std::span<const iovec> pieces) = 0;
  // One DATA payload that arrived partly in the transport's receive buffer
  // (`head`, possibly empty) and partly in a pipe (`piped` bytes readable
  // from `pipe_fd`): the TCP transport splices large payloads past user
  // space (common/splice_pipe.h). Same rules as on_peer_data, and one more:
  // the stream takes every piped byte before it returns (into its socket,
  // or into its queue), so that the pipe is empty for the next frame. The
  // default reads the pipe and hands the bytes to on_peer_data.
  virtual Delivery on_peer_piped(std::span<const uint8_t> head, int pipe_fd, uint32_t piped);
  // The peer sent FIN: no more data will come.
  virtual void on_peer_fin() = 0;
  // The peer reset the stream, or the session had to (out of buffers). The
  // stream is detached when this is called.
  virtual void on_peer_reset(ResetCode code) = 0;
  // Stream or session credit became available after the stream found none.
  virtual void on_send_credit() = 0;
  // The session ended; the stream is detached. With tunnel_done() it only
  // has local delivery left; otherwise it cannot complete over that session.
  virtual void on_session_lost(std::string_view reason) = 0;

 private:
  friend class Session;
  friend class PayloadBatch;
  Session* session_ = nullptr;
  uint32_t id_ = 0;
  SendCredit send_;
  ReceiveWindow receive_;
  bool fin_sent_ = false;
  bool fin_received_ = false;
  bool wants_credit_ = false;       // took no stream credit: waiting for a WINDOW
  bool waits_for_session_ = false;  // in the session's list of streams short of session credit
  // Session::Event bits queued for dispatch (these two are Session's too).
  static constexpr uint8_t kEventFinBit = 1, kEventResetBit = 2;
  uint8_t events_ = 0;
  // Payload of the current transport batch, waiting for its delivery
  // (PayloadBatch).
  uint32_t gathered_pieces_ = 0;
  uint32_t gathered_bytes_ = 0;
  uint32_t gather_order_ = 0;                  // first arrival in the batch, then the delivery cursor
  ResetCode reset_code_ = ResetCode::kCancel;  // with Event::kReset
};

}  // namespace rdmagw::tunnel
