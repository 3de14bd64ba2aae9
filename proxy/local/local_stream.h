// SPDX-License-Identifier: Apache-2.0
#pragma once
// One stream: an application connection joined to one tunnel stream, and
// every piece of its state in one object: the socket, both directions'
// queues and progress (here) and its windows and FINs (tunnel::Stream). It
// holds a handle to the session carrying it; the session holds none to it
// beyond routing frames by id.
//
// The same class serves both ends: on the dialing host the socket is a
// client accepted on a listener; on the far host it is a connection to the
// target. Per direction at most one operation is in flight, so bytes never
// reorder:
//   socket --recv--> DATA frames (zero copy: recv lands in a slab buffer
//                    with headroom for the frame header; the buffer is
//                    picked when bytes arrive, so an idle stream holds none)
//   DATA frames --send (straight from the tunnel's buffer), else queued in
//                  to_socket_ --sendmsg--> socket
// Reading stops while the stream has no send credit (backpressure).
//
// The socket carries SO_LINGER 0 from the start: whatever ends the stream
// other than a clean close in both directions (including rdmagw dying)
// reaches the application as a reset, never as a clean EOF.
//
// Why one class of this size (about 50 methods): the two directions, the
// connect on the far side, the session's events and a takeover all act on
// the same socket and the same two in-flight operations, whose order is
// what keeps bytes in order. It is split by file (local_stream.cc,
// local_stream_handover.cc for the takeover) and what stands alone is
// outside: the queue (ByteQueue), the redirected leg (RedirectedLeg), the
// PROXY header, the origin, the tunnel half (tunnel::Stream).
#include <sys/uio.h>

#include <memory>
#include <string>

#include "common/address.h"
#include "common/byte_queue.h"
#include "common/metrics.h"
#include "common/unique_fd.h"
#include "proxy/io/timed_connect.h"
#include "proxy/local/redirected_leg.h"
#include "proxy/local/socket_receive.h"
#include "proxy/local/stream_host.h"
#include "proxy/local/stream_info.h"
#include "proxy/local/stream_origin.h"
#include "proxy/tunnel/peer_link.h"
#include "proxy/tunnel/session.h"
#include "proxy/tunnel/stream.h"

namespace rdmagw::local {

class LocalStream final : public LocalConnection, public tunnel::Stream, public tunnel::PendingStream {
 public:
  // An application connected to a listener; it waits for a session (attach).
  // `counters` (may be null) are the listener's, kept up to date from here.
  // `destination`: where a transparent listener's client meant to go;
  // `lease`: the Service endpoint it goes to, counted while it lives.
  // `terms`: its listener's (count, idle timeout), held while it lives.
  static LocalStream* from_client(StreamHost& host, UniqueFd fd, std::string listener,
                                  metrics::ListenerMetrics* counters, std::string peer, std::string target,
                                  std::string destination = {}, EndpointLease lease = {}, ListenerTerms terms = {});
  // The peer opened stream `id` to `target`: connect to it. Returns nullptr
  // (and sets *refuse) if no socket could be created. Called mid-parse: it
  // does not touch the session.
  // `origin`: what the peer said of where the stream comes from (null: it
  // does not say).
  // `proxy_header`: the target entry says proxy_protocol: v2, so the
  // connection begins with a PROXY header naming the origin's client.
  static LocalStream* to_target(StreamHost& host, const tunnel::Session& session, uint32_t id, const Endpoint& target,
                                const tunnel::StreamOrigin* origin, bool proxy_header, tunnel::ResetCode* refuse);
  // A takeover: the old process's stream, on `session` (null: none) and
  // `fd`. Returns nullptr when the pool has no room for its bytes (the
  // socket is then reset). A stream not yet opened waits for a session:
  // the caller submits it to its peer link.
  static LocalStream* restore(StreamHost& host, UniqueFd fd, const LocalStreamImage& image, tunnel::Session* session,
                              metrics::ListenerMetrics* counters);
  bool opened() const { return phase_ != Phase::kWaiting; }
  const std::string& peer() const { return peer_; }

  // LocalConnection
  void reset_now(std::string_view reason) override;
  uint64_t bytes_moved() const override { return bytes_up_ + bytes_down_; }
  void end_idle() override;
  bool carrying() const override { return phase_ == Phase::kOpen && !frozen_; }
  bool describe(StreamInfo* out) const override;
  bool ending() const override { return closing_; }
  void freeze() override;
  bool export_image(HandoverImages* out, const SessionIndex& sessions) const override;
  void forget() override;
  void thaw() override;

  // A Service endpoint said to have rdmagw: if its tunnel port refuses the
  // dial this stream waits for, the stream goes to `address` directly
  // instead (divert_on_refusal), as a passthrough would.
  void reach_directly_if_refused(const sockaddr_storage& address, socklen_t length);

  // tunnel::PendingStream
  void attach(tunnel::Session& session) override;
  void abort(tunnel::ResetCode code, std::string_view reason) override;
  bool divert_on_refusal() override;

 private:
  LocalStream(StreamHost& host, UniqueFd fd);
  ~LocalStream() override;

  // tunnel::Stream
  Delivery on_peer_data(std::span<const iovec> pieces) override;
  Delivery on_peer_piped(std::span<const uint8_t> head, int pipe_fd, uint32_t piped) override;
  void on_peer_fin() override;
  void on_peer_reset(tunnel::ResetCode code) override;
  void on_send_credit() override;
  void on_session_lost(std::string_view reason) override;

  enum class Ending { kClean, kReset };
  void on_target_connected(int error);
  TimedConnect& connector();
  // After restore(): picks up the I/O where the old process stopped it.
  void resume_io();
  void start_reading();
  // Sends what a receive produced, or parks it until the session has credit.
  void forward(uint8_t* buffer, uint32_t len);
  void pump_send();
  void maybe_shutdown_write();
  void maybe_done();
  // The one failure path: logs `event` with the reason, counts `why` once,
  // resets the stream towards the peer (with `to_peer`) if a session still
  // carries it, and ends it with a reset towards the application. `by`:
  // who ended it, for the access log ("client" | "target" | "peer" |
  // "tunnel" | "rdmagw"; a string literal).
  void fail(std::string_view event, std::string_view by, metrics::StreamFailure why, tunnel::ResetCode to_peer,
            std::string_view reason, std::string_view error = {});
  // The connection's id (made here for a client, told by the peer for a
  // target), for every log line about the stream; "" if the peer said none.
  std::string connection() const { return connection_of(origin_).text(); }
  // This side's application: the client, or on the far side the target.
  std::string_view app_side() const { return target_side_ ? "target" : "client"; }
  // The session's transport, while it has one: the access log names it.
  void note_transport();
  void write_access_log(Ending how) const;
  // The application's socket failed (recv, send or an error poll).
  void fail_local(int error);
  void terminate(Ending how);

  void on_recv(int res, uint32_t flags);
  void on_send(int res, uint32_t flags);
  void on_error_poll(int res, uint32_t flags);
  // While no receive is posted (no credit), a reset by the application would
  // go unseen: poll the socket for errors instead.
  void watch_for_errors();
  void add_bytes_from_app(uint64_t n);
  void add_bytes_to_app(uint64_t n);
  // With the local legs redirected (redirected_leg.h): admits the socket,
  // once it is connected; then what a send may carry, and what it took.
  void admit_to_redirect();
  size_t send_limit();
  void note_sent(size_t n);

  static constexpr int kMaxIov = 16;

  UniqueFd fd_;
  std::string listener_;  // client side: listener name (logs)
  // reach_directly_if_refused(): where to go instead (length 0: nowhere).
  sockaddr_storage direct_address_{};
  socklen_t direct_length_ = 0;
  std::string peer_;
  std::string target_;

  ByteQueue to_socket_;
  SocketReceive receive_;  // its length: the stream credit the posted receive holds
  // Bytes read while the session had too little credit: sent on on_send_credit().
  uint8_t* parked_buffer_ = nullptr;
  uint32_t parked_len_ = 0;
  iovec iov_[kMaxIov];
  msghdr msg_{};
  // Only a stream to a target connects (224 bytes, most of it the address
  // the kernel reads): made when it first does, so client streams carry none.
  std::unique_ptr<TimedConnect> connect_;
  // The PROXY header to send first once connected (proxy_protocol: v2).
  std::unique_ptr<std::string> proxy_header_;
  // The socket's flows through the local redirect (null: plain TCP legs).
  std::unique_ptr<RedirectedLeg> leg_;

  IoOp recv_op_, send_op_, error_poll_op_;
  bool recv_posted_ = false;
  bool error_poll_posted_ = false;  // watching for a reset while not reading
  bool sending_ = false;
  // The stream's life (docs/protocol.md, "Stream life cycle"): where it
  // stands as a whole, then each direction. What crossed the tunnel is
  // tunnel::Stream's (fin_sent(): our FIN is queued on the session;
  // fin_received(): the peer's FIN arrived); what happened to the socket
  // is here. HALF-CLOSED (local) is read_closed_, HALF-CLOSED (remote) is
  // fin_received(); read_closed_ and write_shut_ (with both FINs crossed)
  // is CLOSED, which ends it cleanly. closing_ marks the end, clean or a
  // reset.
  enum class Phase : uint8_t {
    kWaiting,     // client side: no session has opened it yet
    kConnecting,  // target side: it has its stream id, the target's connect is under way
    kOpen,        // on a session (or done with it), bytes flowing as each direction allows
  };
  Phase phase_ = Phase::kWaiting;
  // Application -> peer: EOF read from the socket, and FIN asked of the
  // session (which fin_sent() confirms once it is queued).
  bool read_closed_ = false;
  // Peer -> application: after the peer's FIN, every byte written to the
  // socket, then shutdown(SHUT_WR).
  bool write_shut_ = false;
  bool closing_ = false;
  bool frozen_ = false;      // a takeover is moving it: no I/O
  uint64_t bytes_up_ = 0;    // socket -> tunnel
  uint64_t bytes_down_ = 0;  // tunnel -> socket
  bool failure_counted_ = false;
  bool target_side_ = false;
  Clock::time_point started_;
  std::chrono::system_clock::time_point started_wall_;  // the access line's start
  // Its phases for the access line, in microseconds from the start (-1: not
  // reached): waiting for a session (client side), connecting to the target
  // (target side; until it failed, too), the first byte to the application.
  int64_t session_wait_us_ = -1;
  int64_t connect_us_ = -1;
  int64_t first_byte_us_ = -1;
  int64_t since_start_us() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
  }
  // Where it comes from: made at accept on the client side, sent in the
  // OPEN, and what the peer's OPEN said on the target side.
  tunnel::StreamOrigin origin_;
  // For the access log (filled only while it is enabled): the application's
  // address (inbound: the far side's, as its OPEN said), a transparent
  // client's original destination, inbound the peer's end of the session,
  // and how it ended.
  std::string client_;
  std::string destination_;
  std::string remote_;
  std::string_view transport_;
  std::string_view ended_by_;
  std::string end_reason_;
  metrics::ListenerMetrics* listener_counters_ = nullptr;
};

}  // namespace rdmagw::local
