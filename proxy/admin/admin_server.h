// SPDX-License-Identifier: Apache-2.0
#pragma once
// The admin HTTP endpoint (docs/admin.md): a small HTTP/1.1 server on
// libevent (a listener and bufferevents) on a thread of its own, so that a
// slow admin client or a slow answer never delays a worker. Requests are
// parsed by http_request.h and answered by admin_routes.h from the Backend,
// synchronously on that thread.
//
// What a client may cost is bounded: at most kMaxConnections connections
// (one more evicts the oldest idle one, or is closed when none is idle), a
// request must arrive whole within kRequestSeconds of its first byte, an
// idle connection closes after kIdleSeconds, an answer the client does not
// read closes it after kWriteSeconds; sizes: http_request.h.
//
//   AdminServer admin(backend);
//   std::string error;
//   if (!admin.start(*parse_host_port(config.admin, &error), &error)) { ... exit 1 }
//   ...
//   admin.stop();  // or let the destructor do it
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/address.h"
#include "proxy/admin/admin_model.h"

struct bufferevent;
struct event;
struct event_base;
struct evconnlistener;
struct sockaddr;

namespace rdmagw::admin {

inline constexpr size_t kMaxConnections = 64;
inline constexpr int kRequestSeconds = 10;
inline constexpr int kIdleSeconds = 30;
inline constexpr int kWriteSeconds = 10;

class AdminServer {
 public:
  explicit AdminServer(Backend& backend);
  ~AdminServer();  // stop()
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds a TCP listening socket on `address` (port 0: any free port, see
  // port()) before returning, so a caller can refuse to start when the port
  // is taken, then serves from a new thread. On failure returns false with
  // *error set (e.g. "bind 127.0.0.1:9901: Address already in use") and
  // leaves nothing running. Once only.
  bool start(const Endpoint& address, std::string* error);

  // Stops serving: closes the listening socket and every admin connection,
  // and joins the thread after the answer in progress, if any. Callable
  // from any thread but the admin thread, more than once.
  void stop();

  // The bound port once start() succeeded, else 0.
  uint16_t port() const { return port_; }

 private:
  struct Connection;
  struct EventBaseDeleter {
    void operator()(event_base* base) const;
  };
  struct EventDeleter {
    void operator()(event* ev) const;
  };
  struct ListenerDeleter {
    void operator()(evconnlistener* listener) const;
  };

  static void on_stop(int fd, short what, void* self);
  static void on_accept(evconnlistener* listener, int fd, sockaddr* addr, int len, void* self);
  // accept() failed for want of descriptors (or memory): the connection
  // stays in the backlog, so the listener would wake at once, fail again,
  // and spin a core (and flood the log). It pauses for 100 ms instead.
  static void on_accept_error(evconnlistener* listener, void* self);
  static void on_accept_resume(int fd, short what, void* self);
  static void on_read(bufferevent* bev, void* connection);
  static void on_written(bufferevent* bev, void* connection);
  static void on_event(bufferevent* bev, short what, void* connection);
  static void on_deadline(int fd, short what, void* connection);
  // Makes room for one more connection; false when every one is busy.
  bool make_room();
  // Answers every whole request buffered on `c` (in order), within bounds.
  void serve(Connection& c);
  // `headers`: more header lines, each ending in CRLF (Response::headers).
  void answer(Connection& c, int status, std::string_view content_type, std::string_view body, std::string_view allow,
              std::string_view headers, bool head, bool keep_alive);
  void arm_deadline(Connection& c, int seconds);
  void close(Connection& c);
  void release_libevent();

  Backend& backend_;
  // Declared in the order of creation; freed in reverse by
  // release_libevent() (connections and events before their base).
  std::unique_ptr<event_base, EventBaseDeleter> base_;
  std::unique_ptr<event, EventDeleter> stop_event_;
  std::unique_ptr<event, EventDeleter> resume_event_;  // re-enables a paused listener
  std::unique_ptr<evconnlistener, ListenerDeleter> listener_;
  bool accept_paused_logged_ = false;                   // once per episode
  bool full_logged_ = false;                            // once per episode
  std::list<std::unique_ptr<Connection>> connections_;  // oldest first
  std::thread thread_;
  std::mutex lifecycle_mu_;  // start() and stop() against each other
  uint16_t port_ = 0;
};

}  // namespace rdmagw::admin
