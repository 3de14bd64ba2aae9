// SPDX-License-Identifier: Apache-2.0
#pragma once
// A passthrough route: the application's connection is joined straight to
// its original destination, on this host, without the tunnel. rdmagw's own
// connection is not redirected again because iptables skips rdmagw's uid.
// One receive and one send in flight per direction; EOF in one direction is
// passed on as shutdown(SHUT_WR); an error on either side resets both. Both
// sockets carry SO_LINGER 0 until both directions ended cleanly.
#include <sys/socket.h>

#include <string>

#include "common/unique_fd.h"
#include "proxy/io/timed_connect.h"
#include "proxy/local/socket_receive.h"
#include "proxy/local/stream_host.h"

namespace rdmagw::local {

class DirectPipe final : public LocalConnection {
 public:
  // Connects to `destination` and relays. The pipe is on the host's list
  // until it ends (it ends itself: both directions done, or an error).
  // `counters` (may be null): the listener's, for its active connections and bytes.
  // `lease`: a Service endpoint's count, held while the pipe lives.
  // `terms`: its listener's (count, idle timeout), held while the pipe lives.
  static void start(StreamHost& host, UniqueFd client, const sockaddr_storage& destination, socklen_t length,
                    std::string listener, metrics::ListenerMetrics* counters, EndpointLease lease = {},
                    ListenerTerms terms = {});

  // A takeover: the old process's pipe on `client` and `server`.
  static void restore(StreamHost& host, UniqueFd client, UniqueFd server, const PipeImage& image,
                      metrics::ListenerMetrics* counters, ListenerTerms terms = {});

  // LocalConnection
  void reset_now(std::string_view reason) override { fail(reason, 0, "rdmagw"); }
  uint64_t bytes_moved() const override { return up_.total + down_.total; }
  void end_idle() override;
  bool carrying() const override { return connected_ && !frozen_; }
  bool ending() const override { return closing_; }
  void freeze() override;
  bool export_image(HandoverImages* out, const SessionIndex& sessions) const override;
  void forget() override;
  void thaw() override;

 private:
  struct Direction {
    DirectPipe* pipe;
    int from = -1;
    int to = -1;
    // Held only from a receive that brought bytes until they are all sent on
    // (the bytes start at kBufferHeadroom): an idle pipe holds none.
    uint8_t* buffer = nullptr;
    uint32_t start = 0;   // where in it the bytes begin (kBufferHeadroom, or 0 after a takeover)
    uint32_t filled = 0;  // bytes received and not yet sent on
    uint32_t sent = 0;
    SocketReceive receive;
    bool busy = false;   // a recv or send is in flight
    bool ended = false;  // EOF passed on
    uint64_t total = 0;  // bytes received this way (the access log)
    IoOp recv_op, send_op;
    void on_recv(int res, uint32_t flags);
    void on_send(int res, uint32_t flags);
  };

  DirectPipe(StreamHost& host, UniqueFd client, std::string listener, metrics::ListenerMetrics* counters);
  ~DirectPipe() override;
  void on_connected(int error);
  // Joins the two sockets, for their I/O.
  void join();
  // After a takeover (or a failed one): picks up each direction where it stopped.
  void resume_io();
  void post_recv(Direction& d);
  void post_send(Direction& d);
  // Ends the pipe with a reset both ways. `error` (an errno, or 0) is logged.
  // `by`: whose socket failed, for the access log ("client" | "target" |
  // "rdmagw"; a string literal).
  void fail(std::string_view what, int error, std::string_view by);
  void end(bool clean);

  UniqueFd client_;
  UniqueFd server_;
  std::string listener_;
  metrics::ListenerMetrics* counters_;
  std::string destination_;
  TimedConnect connect_;
  Direction up_, down_;  // up: client -> destination
  bool closing_ = false;
  bool connected_ = false;
  bool frozen_ = false;  // a takeover is moving it: no I/O
  // The access log's (while it is enabled): the client's address, when the
  // pipe began, and how it ended.
  std::string client_address_;
  Clock::time_point started_ = Clock::now();
  std::chrono::system_clock::time_point started_wall_ = std::chrono::system_clock::now();
  int64_t connect_us_ = -1;     // the connect to the destination, to its success or failure
  int64_t first_byte_us_ = -1;  // the destination's first byte
  int64_t since_start_us() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
  }
  std::string_view ended_by_;
  std::string end_reason_;
};

}  // namespace rdmagw::local
