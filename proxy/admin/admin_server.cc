#include "proxy/admin/admin_server.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>

#include "common/log.h"
#include "common/unique_fd.h"
#include "proxy/admin/admin_access.h"
#include "proxy/admin/admin_routes.h"

namespace rdmagw::admin {
namespace {

// Limits for what an admin client may send. Requests are a line and a few
// headers (POSTs carry no body), so anything bigger is a mistake or abuse.
constexpr ev_ssize_t kMaxHeadersBytes = 8 * 1024;
constexpr ev_ssize_t kMaxBodyBytes = 4 * 1024;
// An idle or stalled connection (keep-alive, a client that stopped
// reading) is closed after this long.
constexpr int kConnectionTimeoutSeconds = 30;

const char* method_name(evhttp_cmd_type method) {
  switch (method) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
  }
  return "UNKNOWN";
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
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

// The listening socket, opened here rather than by evhttp_bind_socket so
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

namespace {
std::mutex g_listeners_mu;
std::map<evconnlistener*, AdminServer*>& listeners() {
  static std::map<evconnlistener*, AdminServer*> map;
  return map;
}
}  // namespace

void AdminServer::register_listener(evconnlistener* listener, AdminServer* server) {
  std::lock_guard lock(g_listeners_mu);
  if (server) listeners()[listener] = server;
  else listeners().erase(listener);
}

AdminServer* AdminServer::server_of(evconnlistener* listener) {
  std::lock_guard lock(g_listeners_mu);
  auto it = listeners().find(listener);
  return it == listeners().end() ? nullptr : it->second;
}

void AdminServer::EventBaseDeleter::operator()(event_base* base) const { event_base_free(base); }
void AdminServer::EvhttpDeleter::operator()(evhttp* http) const { evhttp_free(http); }
void AdminServer::EventDeleter::operator()(event* ev) const { event_free(ev); }

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
  if (base_) http_.reset(evhttp_new(base_.get()));
  if (base_) stop_event_.reset(event_new(base_.get(), -1, 0, &AdminServer::on_stop, this));
  if (!base_ || !http_ || !stop_event_) {
    *error = "cannot set up libevent for the admin endpoint";
    release_libevent();
    return false;
  }
  evhttp* http = http_.get();
  evhttp_set_max_headers_size(http, kMaxHeadersBytes);
  evhttp_set_max_body_size(http, kMaxBodyBytes);
  evhttp_set_timeout(http, kConnectionTimeoutSeconds);
  // Every method reaches our callback, so that a known path with the wrong
  // method gets 405 and its Allow header rather than evhttp's bare 501.
  evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                       EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                       EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
  evhttp_set_gencb(http, &AdminServer::on_request, this);
  evhttp_bound_socket* bound = evhttp_accept_socket_with_handle(http, fd.get());
  if (bound) resume_event_.reset(evtimer_new(base_.get(), &AdminServer::on_accept_resume, this));
  if (!bound || !resume_event_) {
    *error = "cannot serve the admin endpoint on its socket";
    release_libevent();
    return false;
  }
  listener_ = evhttp_bound_socket_get_listener(bound);
  // The error callback gets the listener's user data, which is evhttp's:
  // the server is found by its listener instead.
  register_listener(listener_, this);
  evconnlistener_set_error_cb(listener_, &AdminServer::on_accept_error);
  const int listening_fd = fd.release();  // evhttp owns and closes it now
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
  resume_event_.reset();
  if (listener_) register_listener(listener_, nullptr);
  listener_ = nullptr;
  http_.reset();  // closes the listening socket and the admin connections
  stop_event_.reset();
  base_.reset();
}

void AdminServer::on_accept_error(evconnlistener* listener, void*) {
  int err = EVUTIL_SOCKET_ERROR();
  AdminServer* server = server_of(listener);
  if (!server) return;
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
  if (server->listener_) evconnlistener_enable(server->listener_);
}

void AdminServer::on_stop(int, short, void* self) {
  event_base_loopbreak(static_cast<AdminServer*>(self)->base_.get());
}

void AdminServer::on_request(evhttp_request* request, void* self) {
  auto* server = static_cast<AdminServer*>(self);
  server->accept_paused_logged_ = false;  // accepting again: a next episode is logged
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* path = uri ? evhttp_uri_get_path(uri) : nullptr;
  const char* query = uri ? evhttp_uri_get_query(uri) : nullptr;
  evkeyvalq* in = evhttp_request_get_input_headers(request);
  auto header = [in](const char* name) -> std::optional<std::string_view> {
    const char* value = evhttp_find_header(in, name);
    if (!value) return std::nullopt;
    return std::string_view(value);
  };
  std::shared_ptr<const Config> config = server->backend_.config();
  AccessDecision access =
      config ? check_access(AccessRequest{path ? path : "", header("Authorization"), header("Origin"), header("Host")},
                            config->admin_token.get(), config->admin)
             : AccessDecision{503, "starting\n"};
  Response response = access.status != 0
                          ? Response{access.status, std::string(kTextContentType), access.reason, {}}
                          : handle_request(server->backend_, method_name(evhttp_request_get_command(request)),
                                           path ? path : "", query ? query : "");

  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  evhttp_add_header(headers, "Content-Type", response.content_type.c_str());
  // Answers describe the moment they were asked; no cache should keep one.
  evhttp_add_header(headers, "Cache-Control", "no-store");
  if (!response.allow.empty()) evhttp_add_header(headers, "Allow", response.allow.c_str());
  if (response.status == 401) evhttp_add_header(headers, "WWW-Authenticate", "Bearer");
  std::unique_ptr<evbuffer, void (*)(evbuffer*)> body(evbuffer_new(), evbuffer_free);
  if (!body || evbuffer_add(body.get(), response.body.data(), response.body.size()) != 0) {
    evhttp_send_error(request, 500, "Internal Server Error");
    return;
  }
  evhttp_send_reply(request, response.status, reason_phrase(response.status), body.get());
}

}  // namespace rdmagw::admin
