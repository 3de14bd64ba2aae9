#pragma once
// One application connection, joined to one tunnel stream. The same class
// serves both ends: on the dialing host the socket is a client accepted on a
// listener; on the far host it is a connection to the target.
//
// Per direction at most one operation is in flight, so bytes never reorder:
//   socket --recv--> DATA frames (zero copy: recv lands in a slab buffer
//                    with headroom for the frame header)
//   DATA frames --copy--> to_socket_ queue --send--> socket
// Reading stops while the stream has no send credit (backpressure).
#include <linux/time_types.h>
#include <sys/uio.h>

#include <string>

#include "common/address.h"
#include "common/byte_queue.h"
#include "common/metrics.h"
#include "common/unique_fd.h"
#include "proxy/admin/admin_model.h"
#include "proxy/local/stream_host.h"
#include "proxy/tunnel/peer_link.h"
#include "proxy/tunnel/session.h"

namespace rdmagw::local {

class LocalStream final : public tunnel::StreamEndpoint, public tunnel::PendingStream {
 public:
  // An application connected to a listener; it waits for a session (attach).
  // `counters` (may be null) are the listener's, kept up to date from here.
  static LocalStream* from_client(StreamHost& host, UniqueFd fd, std::string listener,
                                  metrics::ListenerMetrics* counters, std::string peer, std::string target);
  // The peer opened stream `id` to `target`: connect to it. Returns nullptr
  // (and sets *refuse) if no socket could be created.
  static LocalStream* to_target(StreamHost& host, tunnel::Session& session, uint32_t id,
                                const Endpoint& target, tunnel::ResetCode* refuse);

  // For the admin endpoint (GET /streams).
  void describe(admin::StreamInfo* out) const;
  LocalStream* next_in_host() const { return next_; }
  bool closing() const { return closing_; }

  // tunnel::PendingStream
  void attach(tunnel::Session& session) override;
  void abort(tunnel::ResetCode code, std::string_view reason) override;

  // tunnel::StreamEndpoint
  bool on_data(std::span<const uint8_t> bytes) override;
  void on_fin() override;
  void on_reset(tunnel::ResetCode code) override;
  void on_send_credit() override;
  void on_detached() override;

 private:
  LocalStream(StreamHost& host, UniqueFd fd);
  ~LocalStream() override;

  void start_connect(const Endpoint& target);
  void start_reading();
  // Sends what a receive produced, or parks it until the session has credit.
  void forward(uint8_t* buffer, uint32_t len);
  void pump_send();
  void maybe_shutdown_write();
  void maybe_done();
  // Ends the stream; with `abortive` the socket closes with RST (SO_LINGER 0).
  void terminate(bool abortive);
  void finish_op();

  void on_recv(int res, uint32_t flags);
  void on_send(int res, uint32_t flags);
  void on_connect(int res, uint32_t flags);
  void on_connect_timeout(int res, uint32_t flags);
  void on_error_poll(int res, uint32_t flags);
  // While no receive is posted (no credit), a reset by the application would
  // go unseen: poll the socket for errors instead.
  void watch_for_errors();
  // Counts why the stream ended early, once.
  void count_failure(metrics::StreamFailure why);
  void add_bytes_from_app(uint64_t n);
  void add_bytes_to_app(uint64_t n);

  static constexpr int kMaxIov = 16;

  StreamHost& host_;
  UniqueFd fd_;
  tunnel::Session* session_ = nullptr;
  uint32_t id_ = 0;
  std::string listener_;  // client side: listener name (logs)
  std::string peer_;
  std::string target_;

  ByteQueue to_socket_;
  uint8_t* recv_buffer_ = nullptr;
  uint32_t recv_credit_ = 0;
  // Bytes read while the session had too little credit: sent on on_send_credit().
  uint8_t* parked_buffer_ = nullptr;
  uint32_t parked_len_ = 0;
  iovec iov_[kMaxIov];
  msghdr msg_{};
  __kernel_timespec connect_timeout_{};
  sockaddr_storage target_addr_{};
  socklen_t target_len_ = 0;

  IoOp recv_op_, send_op_, connect_op_, timeout_op_, error_poll_op_;
  int inflight_ = 0;
  bool recv_posted_ = false;
  bool error_poll_posted_ = false;  // watching for a reset while not reading
  bool sending_ = false;
  bool connecting_ = false;
  bool read_closed_ = false;   // saw EOF from the socket and sent FIN
  bool remote_fin_ = false;    // peer sent FIN
  bool write_shut_ = false;    // shutdown(SHUT_WR) done
  bool closing_ = false;
  uint64_t bytes_up_ = 0;      // socket -> tunnel
  uint64_t bytes_down_ = 0;    // tunnel -> socket
  bool failure_counted_ = false;
  bool target_side_ = false;
  Clock::time_point started_;
  metrics::ListenerMetrics* listener_counters_ = nullptr;
  LocalStream* prev_ = nullptr;  // StreamHost's list of live streams
  LocalStream* next_ = nullptr;
};

}  // namespace rdmagw::local
