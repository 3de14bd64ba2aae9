#pragma once
// A passthrough route: the application's connection is joined straight to
// its original destination, on this host, without the tunnel. rdmagw's own
// connection is not redirected again because iptables skips rdmagw's uid.
// One receive and one send in flight per direction; EOF in one direction is
// passed on as shutdown(SHUT_WR); an error on either side resets both.
#include <linux/time_types.h>
#include <sys/socket.h>

#include <string>

#include "common/unique_fd.h"
#include "proxy/local/stream_host.h"

namespace rdmagw::local {

class DirectPipe {
 public:
  // Connects to `destination` and relays; frees itself when both directions end.
  // `counters` (may be null): the listener's, for its active connections and bytes.
  static void start(StreamHost& host, UniqueFd client, const sockaddr_storage& destination, socklen_t length,
                    std::string listener, metrics::ListenerMetrics* counters);

 private:
  struct Direction {
    DirectPipe* pipe;
    int from = -1;
    int to = -1;
    uint8_t* buffer = nullptr;
    uint32_t filled = 0;   // bytes received and not yet sent on
    uint32_t sent = 0;
    bool busy = false;     // a recv or send is in flight
    bool ended = false;    // EOF passed on
    IoOp recv_op, send_op;
    void on_recv(int res, uint32_t flags);
    void on_send(int res, uint32_t flags);
  };

  DirectPipe(StreamHost& host, UniqueFd client, std::string listener, metrics::ListenerMetrics* counters);
  ~DirectPipe();
  void on_connect(int res, uint32_t flags);
  void on_timeout(int res, uint32_t flags);
  void post_recv(Direction& d);
  void post_send(Direction& d);
  void fail(const char* what, int error);
  void finish_op();

  StreamHost& host_;
  UniqueFd client_;
  UniqueFd server_;
  std::string listener_;
  metrics::ListenerMetrics* counters_;
  std::string destination_;
  sockaddr_storage addr_{};
  socklen_t addr_len_ = 0;
  __kernel_timespec timeout_{};
  IoOp connect_op_, timeout_op_;
  Direction up_, down_;  // up: client -> destination
  int inflight_ = 0;
  bool closing_ = false;
};

}  // namespace rdmagw::local
