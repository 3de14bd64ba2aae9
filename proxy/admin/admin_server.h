#pragma once
// The admin HTTP endpoint (docs/admin.md): libevent's evhttp on a thread of
// its own, so that a slow admin client or a slow answer never delays a
// worker. Each request is answered by admin_routes.h from the Backend,
// synchronously on that thread.
//
//   AdminServer admin(backend);
//   std::string error;
//   if (!admin.start(*parse_host_port(config.admin, &error), &error)) { ... exit 1 }
//   ...
//   admin.stop();  // or let the destructor do it
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/address.h"
#include "proxy/admin/admin_model.h"

struct event;
struct event_base;
struct evhttp;
struct evhttp_request;
struct evconnlistener;

namespace rdmagw::admin {

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
  struct EventBaseDeleter {
    void operator()(event_base* base) const;
  };
  struct EvhttpDeleter {
    void operator()(evhttp* http) const;
  };
  struct EventDeleter {
    void operator()(event* ev) const;
  };

  static void on_request(evhttp_request* request, void* self);
  static void on_stop(int fd, short what, void* self);
  // accept() failed for want of descriptors (or memory): the connection
  // stays in the backlog, so the listener would wake at once, fail again,
  // and spin a core (and flood the log). It pauses for kAcceptPause instead.
  static void on_accept_error(evconnlistener* listener, void* self);
  static void on_accept_resume(int fd, short what, void* self);
  static void register_listener(evconnlistener* listener, AdminServer* server);  // nullptr: forget it
  static AdminServer* server_of(evconnlistener* listener);
  void release_libevent();

  Backend& backend_;
  // Declared in the order of creation; freed in reverse by
  // release_libevent() (evhttp and events before their base).
  std::unique_ptr<event_base, EventBaseDeleter> base_;
  std::unique_ptr<event, EventDeleter> stop_event_;
  std::unique_ptr<event, EventDeleter> resume_event_;  // re-enables a paused listener
  evconnlistener* listener_ = nullptr;                 // evhttp's, for pausing
  bool accept_paused_logged_ = false;                  // once per episode
  std::unique_ptr<evhttp, EvhttpDeleter> http_;
  std::thread thread_;
  std::mutex lifecycle_mu_;  // start() and stop() against each other
  uint16_t port_ = 0;
};

}  // namespace rdmagw::admin
