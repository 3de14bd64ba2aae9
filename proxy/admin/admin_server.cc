// SPDX-License-Identifier: Apache-2.0
#include "proxy/admin/admin_server.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <system_error>

#include "common/log.h"
#include "common/unique_fd.h"
#include "proxy/admin/admin_access.h"
#include "proxy/admin/admin_routes.h"
#include "proxy/admin/http_request.h"

namespace rdmagw::admin {
namespace {

// Answers queued beyond this stop the reading of further pipelined requests
// until the client has taken them.
constexpr size_t kMaxQueuedAnswerBytes = 1 << 20;

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 505:
      return "HTTP Version Not Supported";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
  }
  return "Unknown";
}

// libevent must be told to use locks before the first event_base exists;
// only then may another thread (stop()) activate an event of our base.
void enable_libevent_threads() {
  static std::once_flag once;
  std::call_once(once, [] { evthread_use_pthreads(); });
}

uint16_t bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

// The listening socket, opened here rather than by evconnlistener_new_bind so
// that a failure names the system call and its errno exactly.
UniqueFd listen_on(const Endpoint& address, std::string* error) {
  const std::string where = sockaddr_to_string(reinterpret_cast<const sockaddr*>(&address.addr), address.addr_len);
  auto fail = [&](const char* call) {
    *error = std::string(call) + " " + where + ": " + std::strerror(errno);
    return UniqueFd();
  };
  if (address.kind != Endpoint::Kind::kTcp) {
    *error = "the admin endpoint needs an IP:PORT address, got " + where;
    return UniqueFd();
  }
  UniqueFd fd(socket(address.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fail("socket");
  // A restarted rdmagw can bind again while the old admin connections sit
  // in TIME_WAIT.
  int one = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) return fail("setsockopt");
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&address.addr), address.addr_len) != 0) return fail("bind");
  if (listen(fd.get(), 64) != 0) return fail("listen");
  return fd;
}

}  // namespace

struct AdminServer::Connection {
  AdminServer* server = nullptr;
  bufferevent* bev = nullptr;
  event* deadline = nullptr;
  std::list<std::unique_ptr<Connection>>::iterator self;
  bool in_request = false;  // part of a request has arrived: its deadline runs
  bool closing = false;     // the last answer is queued: close once it is written
  ~Connection() {
    if (deadline) event_free(deadline);
    if (bev) bufferevent_free(bev);  // closes the socket
  }
  bool idle() const { return !in_request && !closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0; }
};

void AdminServer::EventBaseDeleter::operator()(event_base* base) const { event_base_free(base); }
void AdminServer::EventDeleter::operator()(event* ev) const { event_free(ev); }
void AdminServer::ListenerDeleter::operator()(evconnlistener* listener) const { evconnlistener_free(listener); }

AdminServer::AdminServer(Backend& backend) : backend_(backend) {}

AdminServer::~AdminServer() { stop(); }

bool AdminServer::start(const Endpoint& address, std::string* error) {
  std::lock_guard lock(lifecycle_mu_);
  if (base_) {
    *error = "the admin endpoint is already started";
    return false;
  }
  enable_libevent_threads();
  UniqueFd fd = listen_on(address, error);
  if (!fd.valid()) return false;

  base_.reset(event_base_new());
  if (base_) stop_event_.reset(event_new(base_.get(), -1, 0, &AdminServer::on_stop, this));
  if (base_) resume_event_.reset(evtimer_new(base_.get(), &AdminServer::on_accept_resume, this));
  if (base_)
    listener_.reset(
        evconnlistener_new(base_.get(), &AdminServer::on_accept, this, LEV_OPT_CLOSE_ON_FREE, -1, fd.get()));
  if (!base_ || !stop_event_ || !resume_event_ || !listener_) {
    *error = "cannot set up libevent for the admin endpoint";
    release_libevent();
    return false;
  }
  const int listening_fd = fd.release();  // the listener owns and closes it now
  evconnlistener_set_error_cb(listener_.get(), &AdminServer::on_accept_error);
  port_ = bound_port(listening_fd);

  // The thread takes every signal blocked: SIGTERM and SIGHUP are for the
  // main thread, and SIGPIPE from a client that went away must turn into
  // EPIPE here, whatever the process does with it.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  try {
    thread_ = std::thread([base = base_.get()] { event_base_dispatch(base); });
  } catch (const std::system_error& e) {
    *error = std::string("cannot start the admin thread: ") + e.what();
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (!thread_.joinable()) {
    release_libevent();
    port_ = 0;
    return false;
  }
  return true;
}

void AdminServer::stop() {
  std::lock_guard lock(lifecycle_mu_);
  if (thread_.joinable()) {
    // event_base_loopbreak() from here could be lost if the loop has not
    // started yet (the loop clears the flag when it starts); an active event
    // stays pending until the loop runs it, whenever that is.
    event_active(stop_event_.get(), 0, 0);
    thread_.join();
  }
  release_libevent();
  port_ = 0;
}

void AdminServer::release_libevent() {
  connections_.clear();  // closes the admin connections
  listener_.reset();     // and the listening socket
  resume_event_.reset();
  stop_event_.reset();
  base_.reset();
}

void AdminServer::on_stop(int, short, void* self) {
  event_base_loopbreak(static_cast<AdminServer*>(self)->base_.get());
}

void AdminServer::on_accept_error(evconnlistener* listener, void* self) {
  int err = EVUTIL_SOCKET_ERROR();
  auto* server = static_cast<AdminServer*>(self);
  evconnlistener_disable(listener);
  if (!server->accept_paused_logged_) {
    server->accept_paused_logged_ = true;
    log::warn("admin_accept_paused")
        .kv("error", strerror(err))
        .kv("next", "trying again every 100 ms; logged once until an accept succeeds");
  }
  timeval pause{0, 100 * 1000};
  evtimer_add(server->resume_event_.get(), &pause);
}

void AdminServer::on_accept_resume(int, short, void* self) {
  auto* server = static_cast<AdminServer*>(self);
  if (server->listener_) evconnlistener_enable(server->listener_.get());
}

bool AdminServer::make_room() {
  if (connections_.size() < kMaxConnections) return true;
  // The oldest idle keep-alive connection goes: it has nothing in progress.
  for (auto& c : connections_) {
    if (c->idle()) {
      close(*c);
      return true;
    }
  }
  return false;
}

void AdminServer::on_accept(evconnlistener*, int fd, sockaddr*, int, void* self) {
  auto* server = static_cast<AdminServer*>(self);
  server->accept_paused_logged_ = false;  // accepting again: a next episode is logged
  if (!server->make_room()) {
    evutil_closesocket(fd);
    if (!server->full_logged_) {
      server->full_logged_ = true;
      log::warn("admin_connection_refused")
          .kv("reason", "every one of the " + std::to_string(kMaxConnections) +
                            " admin connections is in the middle of a request")
          .kv("next", "refusing until one finishes; logged once per episode");
    }
    return;
  }
  server->full_logged_ = false;
  auto c = std::make_unique<Connection>();
  c->server = server;
  c->bev = bufferevent_socket_new(server->base_.get(), fd, BEV_OPT_CLOSE_ON_FREE);
  if (c->bev) c->deadline = evtimer_new(server->base_.get(), &AdminServer::on_deadline, c.get());
  if (!c->bev || !c->deadline) {
    if (!c->bev) evutil_closesocket(fd);
    return;
  }
  bufferevent_setcb(c->bev, &AdminServer::on_read, &AdminServer::on_written, &AdminServer::on_event, c.get());
  timeval write_timeout{kWriteSeconds, 0};
  bufferevent_set_timeouts(c->bev, nullptr, &write_timeout);
  bufferevent_enable(c->bev, EV_READ | EV_WRITE);
  Connection& ref = *c;
  server->connections_.push_back(std::move(c));
  ref.self = std::prev(server->connections_.end());
  server->arm_deadline(ref, kIdleSeconds);
}

void AdminServer::arm_deadline(Connection& c, int seconds) {
  timeval after{seconds, 0};
  evtimer_add(c.deadline, &after);
}

void AdminServer::close(Connection& c) { connections_.erase(c.self); }

void AdminServer::on_deadline(int, short, void* connection) {
  auto* c = static_cast<Connection*>(connection);
  // Idle too long, or a request that did not arrive whole in time.
  c->server->close(*c);
}

void AdminServer::on_event(bufferevent*, short what, void* connection) {
  auto* c = static_cast<Connection*>(connection);
  // A client that half-closed after its request still gets the answer.
  if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR) && evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) {
    c->closing = true;
    bufferevent_disable(c->bev, EV_READ);
    return;
  }
  // EOF, an error, or an answer the client did not take within kWriteSeconds.
  c->server->close(*c);
}

void AdminServer::on_written(bufferevent*, void* connection) {
  auto* c = static_cast<Connection*>(connection);
  if (c->closing) {
    c->server->close(*c);
    return;
  }
  // Requests held back while answers queued up can go on now.
  bufferevent_enable(c->bev, EV_READ);
  c->server->serve(*c);
}

void AdminServer::on_read(bufferevent*, void* connection) {
  auto* c = static_cast<Connection*>(connection);
  c->server->serve(*c);
}

void AdminServer::serve(Connection& c) {
  evbuffer* in = bufferevent_get_input(c.bev);
  evbuffer* out = bufferevent_get_output(c.bev);
  while (!c.closing && evbuffer_get_length(in) > 0) {
    if (evbuffer_get_length(out) > kMaxQueuedAnswerBytes) {
      // Held back until the client takes its answers (on_written): it may
      // not pile up requests meanwhile either.
      bufferevent_disable(c.bev, EV_READ);
      return;
    }
    if (!c.in_request) {
      c.in_request = true;
      arm_deadline(c, kRequestSeconds);
    }
    // The parser sees at most a whole request's worth: a longer input is
    // refused by the limits before it could be needed.
    size_t window = std::min(evbuffer_get_length(in), kMaxHeadBytes + kMaxBodyBytes);
    const char* bytes = reinterpret_cast<const char*>(evbuffer_pullup(in, static_cast<ev_ssize_t>(window)));
    HttpRequest request;
    HttpParse parsed = parse_http_request(std::string_view(bytes, window), &request);
    if (parsed.status == HttpParse::Status::kNeedMore) return;
    if (parsed.status == HttpParse::Status::kError) {
      evbuffer_drain(in, evbuffer_get_length(in));
      answer(c, parsed.error_status, kTextContentType, parsed.error + "\n", {}, {}, false, false);
      return;
    }
    evbuffer_drain(in, parsed.consumed);
    std::shared_ptr<const Config> config = backend_.config();
    AccessDecision access =
        config ? check_access(AccessRequest{request.path, request.authorization, request.origin, request.host},
                              config->admin_token.get(), config->admin)
               : AccessDecision{503, "starting\n"};
    Response response = access.status != 0 ? Response{access.status, std::string(kTextContentType), access.reason, {}}
                                           : handle_request(backend_, request.method, request.path, request.query);
    answer(c, response.status, response.content_type, response.body, response.allow, response.headers,
           request.method == "HEAD", request.keep_alive);
    c.in_request = false;
    if (!c.closing) arm_deadline(c, kIdleSeconds);
  }
}

void AdminServer::answer(Connection& c, int status, std::string_view content_type, std::string_view body,
                         std::string_view allow, std::string_view headers, bool head, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  out += "Content-Type: " + std::string(content_type) + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  // Answers describe the moment they were asked; no cache should keep one.
  out += "Cache-Control: no-store\r\n";
  if (!allow.empty()) out += "Allow: " + std::string(allow) + "\r\n";
  if (status == 401) out += "WWW-Authenticate: Bearer\r\n";
  out += headers;
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!head) out += body;
  evbuffer_add(bufferevent_get_output(c.bev), out.data(), out.size());
  if (!keep_alive) {
    c.closing = true;
    bufferevent_disable(c.bev, EV_READ);
    arm_deadline(c, kWriteSeconds);
  }
}

}  // namespace rdmagw::admin
