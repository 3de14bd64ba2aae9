// SPDX-License-Identifier: Apache-2.0
// LocalStream's state machine with real loopback sockets and a real ring,
// over a real Session whose transport is a fake: the test plays the peer
// sidecar (frames in, frames out) and the application (the other end of a
// loopback TCP connection). Network: 127.0.0.1 only.
#include "proxy/local/local_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer_pool.h"
#include "common/metrics.h"
#include "common/unique_fd.h"
#include "config/config.h"
#include "proxy/io/event_loop.h"
#include "proxy/local/stream_host.h"
#include "proxy/tunnel/peer_link.h"
#include "proxy/tunnel/session.h"
#include "tests/unit/fake_transport.h"
#include "tunnel_keys.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;
using rdmagw::local::LocalStream;
using rdmagw::local::StreamHost;
using rdmagw::test::FakeTransport;
using rdmagw::test::Frame;
using rdmagw::test::tunnel_keys;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kPayload = 16384;
constexpr const char* kTarget = "tcp:127.0.0.1:9000";

class Owner final : public SessionOwner {
 public:
  void on_session_open(Session&) override { ++opened; }
  void on_session_closed(Session&, SessionEnd e, std::string_view r) override {
    ++closed;
    end = e;
    reason = std::string(r);
    if (holder) holder->reset();  // the owner lets go, as PeerLink does
  }
  void on_session_draining(Session&) override { ++draining; }
  Stream* on_stream_open(Session& session, uint32_t id, std::string_view target, const tunnel::StreamOrigin* origin,
                         ResetCode* refuse) override {
    if (open_hook) return open_hook(session, id, target, origin, refuse);
    *refuse = ResetCode::kNotAllowed;
    return nullptr;
  }
  // The far side: what to do with a stream the peer opens.
  std::function<Stream*(Session&, uint32_t, std::string_view, const tunnel::StreamOrigin*, ResetCode*)> open_hook;
  IoPtr<Session>* holder = nullptr;
  int opened = 0, closed = 0, draining = 0;
  SessionEnd end = SessionEnd::kLocalClose;
  std::string reason;
};

struct PeerHello {
  uint32_t max_data = kPayload;
  uint32_t stream_window = 256 * 1024;
  uint64_t session_window = 32ull * 1024 * 1024;
};

// A worker's worth of the local layer, with one open dialer session.
struct Rig {
  BufferPool pool{kBufferHeadroom + kPayload, 1024};
  metrics::WorkerMetrics metrics;
  EventLoop loop;
  // As a worker has it: active on 5.19+ kernels, inactive (streams poll,
  // then read) under RDMAGW_IO_URING=baseline, as ctest also runs these.
  ProvidedBuffers receive_ring;
  StreamHost host{loop, pool, metrics, 0, kPayload, 1000};
  Owner owner;
  IoPtr<Session> session;
  FakeTransport* transport = nullptr;

  explicit Rig(SessionSettings settings = {}, PeerHello hello = {}, Session::Role role = Session::Role::kDialer) {
    std::string error;
    INFO(error);
    REQUIRE(loop.init(256, &error));
    std::string no_ring;
    if (receive_ring.init(loop, pool, 64, kBufferHeadroom, kPayload, &no_ring))
      host.receive_ring = &receive_ring;
    else
      REQUIRE(rdmagw::baseline_io_uring_forced());  // every kernel CI runs on has buffer rings
    settings.node = "a";
    // Streams end with their session (it does not resume), as the tests
    // here expect.
    tunnel_keys(settings).resume_timeout_ms = 0;
    auto t = make_io<FakeTransport>(loop, pool, kMaxPayload);
    transport = t.get();
    session = make_io<Session>(loop, pool, role, settings, std::move(t), &owner);
    owner.holder = &session;
    session->start();
    REQUIRE(transport->inject_all(
        test::hello_bytes(test::hello(hello.max_data, hello.stream_window, hello.session_window, "b"))));
    loop.end_batch();
    REQUIRE(session->open());
    REQUIRE(owner.opened == 1);
    auto frames = transport->written();
    REQUIRE(frames.size() == 1);
    REQUIRE(frames[0].type() == FrameType::kHello);
  }
  ~Rig() {
    // The loop deletes what is left while the host and the pool still exist.
    if (session) session->disown();
    session.reset();
    loop.shut_down();
  }

  // Runs batches until `done()` holds: at most 2000 batches and 5 s.
  bool run_until(const std::function<bool()>& done) {
    auto deadline = Clock::now() + 5s;
    for (int i = 0; i < 2000 && Clock::now() < deadline; ++i) {
      if (done()) return true;
      loop.run_once(2ms);
    }
    return done();
  }
  void run_a_little() {
    for (int i = 0; i < 5; ++i) loop.run_once(2ms);
  }

  // Frames the session sent so far, of one type (optionally on one stream).
  std::vector<Frame> sent(FrameType type, uint32_t id = 0) {
    transport->written();
    std::vector<Frame> out;
    for (const auto& f : transport->all_written())
      if (f.type() == type && (id == 0 || f.id() == id)) out.push_back(f);
    return out;
  }
  // Payload bytes of every DATA frame on `id`, in order.
  std::string data_sent(uint32_t id) {
    std::string out;
    for (const auto& f : sent(FrameType::kData, id)) out += f.text();
    return out;
  }
  bool inject(const std::vector<uint8_t>& frame) { return transport && transport->inject_all(frame); }
};

// A loopback TCP connection: `app` is the application's end, `proxy` the end
// rdmagw accepted (non-blocking, as the acceptor makes it).
struct TcpPair {
  UniqueFd app;
  UniqueFd proxy;
};

TcpPair tcp_pair(int app_rcvbuf = 0, int proxy_sndbuf = 0) {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(listener.valid());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::listen(listener.get(), 4) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
  TcpPair p;
  p.app.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(p.app.valid());
  if (app_rcvbuf > 0) REQUIRE(::setsockopt(p.app.get(), SOL_SOCKET, SO_RCVBUF, &app_rcvbuf, sizeof(app_rcvbuf)) == 0);
  REQUIRE(::connect(p.app.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  p.proxy.reset(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  REQUIRE(p.proxy.valid());
  if (proxy_sndbuf > 0)
    REQUIRE(::setsockopt(p.proxy.get(), SOL_SOCKET, SO_SNDBUF, &proxy_sndbuf, sizeof(proxy_sndbuf)) == 0);
  return p;
}

void app_send(const UniqueFd& fd, std::string_view bytes) {
  REQUIRE(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}

// Waits (briefly) until `fd` has something to read: loopback delivers at
// once, but the test does not rely on it.
void wait_readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  ::poll(&p, 1, 200);
}

// The application resets its connection: SO_LINGER 0, then close: RST.
void app_reset(UniqueFd& fd) {
  linger lg{1, 0};
  REQUIRE(::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
  fd.reset();
}

// What the application reads, without blocking.
struct AppRead {
  std::string bytes;
  bool eof = false;
  int error = 0;  // errno of a failed read (ECONNRESET...)
};

// Reads what is there now into `r`; true once the read side ended (EOF or error).
bool app_read_some(int fd, AppRead& r) {
  char buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      r.bytes.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      r.eof = true;
      return true;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (errno == EINTR) continue;
    r.error = errno;
    return true;
  }
}

// Reads until EOF or an error, running the loop meanwhile.
AppRead app_read_to_end(Rig& rig, int fd) {
  AppRead r;
  rig.run_until([&] { return app_read_some(fd, r); });
  return r;
}

// Opens a client stream on the rig's session for a fresh connection; `before`
// runs on the application's end before the stream attaches.
struct ClientStream {
  TcpPair pair;
  LocalStream* stream = nullptr;  // valid while host.live counts it (tests check)
};

ClientStream open_client(Rig& rig, const std::function<void(UniqueFd&)>& before = {}, int app_rcvbuf = 0,
                         int proxy_sndbuf = 0) {
  ClientStream c;
  c.pair = tcp_pair(app_rcvbuf, proxy_sndbuf);
  if (before) {
    before(c.pair.app);
    wait_readable(c.pair.proxy.get());
  }
  c.stream = LocalStream::from_client(rig.host, std::move(c.pair.proxy), "lst", nullptr, "b", kTarget);
  c.stream->attach(*rig.session);
  rig.loop.end_batch();
  return c;
}

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

uint64_t failed(const Rig& rig, metrics::StreamFailure why) {
  return rig.metrics.streams_failed[static_cast<size_t>(why)].value();
}

}  // namespace

// --- opening ------------------------------------------------------------------------------

TEST_CASE("local: from_client + attach sends OPEN carrying the bytes the app already wrote (0-RTT)") {
  Rig rig;
  ClientStream c = open_client(rig, [](UniqueFd& app) { app_send(app, "GET / HTTP/1.0\r\n\r\n"); });
  auto opens = rig.sent(FrameType::kOpen);
  REQUIRE(opens.size() == 1);
  CHECK(opens[0].id() == 1);
  OpenPayload open;
  std::string reason;
  REQUIRE(decode_open(opens[0].payload, &open, &reason));
  CHECK(open.target == kTarget);
  CHECK(std::string(open.first_bytes.begin(), open.first_bytes.end()) == "GET / HTTP/1.0\r\n\r\n");
  CHECK(rig.session->stream_count() == 1);
  CHECK(rig.metrics.streams_opened_outbound.value() == 1);
  CHECK(rig.host.live == 1);
  local::StreamInfo info;
  REQUIRE(c.stream->describe(&info));
  CHECK(info.state == "open");
  CHECK(info.stream_id == 1);
  CHECK(info.bytes_from_app == 18);

  // Later bytes go as DATA.
  app_send(c.pair.app, "more");
  REQUIRE(rig.run_until([&] { return rig.data_sent(1) == "more"; }));
}

TEST_CASE("local: an app that wrote nothing yet gets an empty OPEN, then DATA") {
  Rig rig;
  ClientStream c = open_client(rig);
  auto opens = rig.sent(FrameType::kOpen);
  REQUIRE(opens.size() == 1);
  OpenPayload open;
  std::string reason;
  REQUIRE(decode_open(opens[0].payload, &open, &reason));
  CHECK(open.first_bytes.empty());
  app_send(c.pair.app, "hello");
  REQUIRE(rig.run_until([&] { return rig.data_sent(1) == "hello"; }));
}

TEST_CASE("local: an app that wrote and closed before the session came gets OPEN with its bytes, then FIN") {
  Rig rig;
  ClientStream c = open_client(rig, [](UniqueFd& app) {
    app_send(app, "ping");
    REQUIRE(::shutdown(app.get(), SHUT_WR) == 0);
  });
  auto opens = rig.sent(FrameType::kOpen);
  REQUIRE(opens.size() == 1);
  OpenPayload open;
  std::string reason;
  REQUIRE(decode_open(opens[0].payload, &open, &reason));
  CHECK(std::string(open.first_bytes.begin(), open.first_bytes.end()) == "ping");
  REQUIRE(rig.run_until([&] { return rig.sent(FrameType::kFin, 1).size() == 1; }));
  // The reverse direction still works: the peer answers, then ends.
  REQUIRE(rig.inject(test::data_bytes(1, "pong")));
  REQUIRE(rig.inject(test::fin_bytes(1)));
  rig.loop.end_batch();
  AppRead r = app_read_to_end(rig, c.pair.app.get());
  CHECK(r.bytes == "pong");
  CHECK(r.eof);
  CHECK(r.error == 0);
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
}

// --- the two directions -------------------------------------------------------------------

TEST_CASE("local: app EOF sends FIN; the stream stays open for the reverse direction") {
  Rig rig;
  ClientStream c = open_client(rig);
  app_send(c.pair.app, "request");
  REQUIRE(::shutdown(c.pair.app.get(), SHUT_WR) == 0);
  REQUIRE(rig.run_until([&] { return rig.sent(FrameType::kFin, 1).size() == 1; }));
  CHECK(rig.data_sent(1) == "request");
  // The FIN follows the data.
  auto all = rig.transport->all_written();
  size_t fin_at = 0, last_data_at = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].type() == FrameType::kFin) fin_at = i;
    if (all[i].type() == FrameType::kData) last_data_at = i;
  }
  CHECK(fin_at > last_data_at);
  CHECK(rig.host.live == 1);
  local::StreamInfo info;
  REQUIRE(c.stream->describe(&info));
  CHECK(info.state == "half-closed");

  // The reply still reaches the app, then its FIN: a clean end both ways.
  REQUIRE(rig.inject(test::data_bytes(1, "response")));
  REQUIRE(rig.inject(test::fin_bytes(1)));
  rig.loop.end_batch();
  AppRead r = app_read_to_end(rig, c.pair.app.get());
  CHECK(r.bytes == "response");
  CHECK(r.eof);
  CHECK(r.error == 0);
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(rig.session->stream_count() == 0);  // detached
  CHECK(rig.sent(FrameType::kReset).empty());
  for (size_t i = 0; i < static_cast<size_t>(metrics::StreamFailure::kCount); ++i)
    CHECK(rig.metrics.streams_failed[i].value() == 0);
}

TEST_CASE("local: an idle stream holds no buffer; its bytes take one only when they arrive") {
  Rig rig;
  size_t before = rig.pool.in_use();  // the ring's buffers, lent to the kernel
  std::vector<ClientStream> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(open_client(rig));
  rig.run_a_little();
  rig.transport->written();  // the OPENs leave: the fake wire gives their buffers back
  CHECK(rig.host.live == 100);
  // 100 streams waiting for their applications' bytes, no buffer among them
  // (the session's output queue may keep one block for small frames).
  CHECK(rig.pool.in_use() <= before + 1);
  // Bytes on every one: each is read and forwarded as it arrives.
  for (size_t i = 0; i < idle.size(); ++i) app_send(idle[i].pair.app, "ping " + std::to_string(i));
  REQUIRE(rig.run_until([&] {
    for (size_t i = 0; i < idle.size(); ++i)
      if (rig.data_sent(idle[i].stream->stream_id()) != "ping " + std::to_string(i)) return false;
    return true;
  }));
  rig.run_a_little();
  rig.transport->written();
  // Sent frames gave their buffers back: idle again, no buffer held (the
  // session's output queue may keep one block for small frames).
  CHECK(rig.pool.in_use() <= before + 1);
  if (rig.host.receive_ring) CHECK(rig.receive_ring.empty_slots() == 0);
}

TEST_CASE("local: peer DATA appears on the app socket") {
  Rig rig;
  ClientStream c = open_client(rig);
  REQUIRE(rig.inject(test::data_bytes(1, "hello ")));
  REQUIRE(rig.inject(test::data_bytes(1, "world")));
  rig.loop.end_batch();
  AppRead r;
  REQUIRE(rig.run_until([&] {
    app_read_some(c.pair.app.get(), r);
    return r.bytes.size() >= 11;
  }));
  CHECK(r.bytes == "hello world");
  CHECK_FALSE(r.eof);
  CHECK(r.error == 0);
  // The socket had room: the bytes went to it straight from the receive
  // buffer, none through the stream's queue.
  CHECK(rig.session->counters().bytes_in == 11);
  CHECK(rig.session->counters().bytes_queued == 0);
}

TEST_CASE("local: peer FIN reaches the app as EOF after the data; the app can still send (half-close)") {
  Rig rig;
  ClientStream c = open_client(rig);
  REQUIRE(rig.inject(test::data_bytes(1, "last words")));
  REQUIRE(rig.inject(test::fin_bytes(1)));
  rig.loop.end_batch();
  AppRead r = app_read_to_end(rig, c.pair.app.get());
  CHECK(r.bytes == "last words");
  CHECK(r.eof);
  CHECK(r.error == 0);
  CHECK(rig.host.live == 1);
  // The other direction is open.
  app_send(c.pair.app, "still here");
  REQUIRE(rig.run_until([&] { return rig.data_sent(1) == "still here"; }));
  CHECK(rig.sent(FrameType::kFin, 1).empty());
  REQUIRE(::shutdown(c.pair.app.get(), SHUT_WR) == 0);
  REQUIRE(rig.run_until([&] { return rig.sent(FrameType::kFin, 1).size() == 1; }));
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(rig.sent(FrameType::kReset).empty());
}

TEST_CASE("local: bulk peer DATA beyond what the socket takes is queued, delivered in order, and credited back") {
  SessionSettings settings;
  tunnel_keys(settings).stream_window = 1024 * 1024;
  Rig rig(settings);
  ClientStream c = open_client(rig, {}, /*app_rcvbuf=*/4096, /*proxy_sndbuf=*/4096);
  const std::string body = pattern(512 * 1024);
  for (size_t off = 0; off < body.size(); off += kPayload)
    REQUIRE(rig.inject(test::data_bytes(1, std::string_view(body).substr(off, kPayload))));
  rig.loop.end_batch();
  AppRead r;
  REQUIRE(rig.run_until([&] {
    app_read_some(c.pair.app.get(), r);
    return r.bytes.size() >= body.size() || r.error != 0;
  }));
  CHECK(r.error == 0);
  CHECK(r.bytes.size() == body.size());
  CHECK(r.bytes == body);
  // What was delivered came back as credit: stream WINDOWs add up to most of it.
  uint64_t granted = 0;
  for (const auto& w : rig.sent(FrameType::kWindow, 1)) granted += w.u32();
  CHECK(granted >= body.size() - settings.tunnel->stream_window / 4);
  CHECK(granted <= body.size());
  // A 4 KiB receive buffer takes little at once: most bytes waited in the
  // queue, and the counter says so (but not more than arrived).
  CHECK(rig.session->counters().bytes_in == body.size());
  CHECK(rig.session->counters().bytes_queued > body.size() / 2);
  CHECK(rig.session->counters().bytes_queued < body.size());
}

TEST_CASE("local: without stream credit the stream stops reading until a WINDOW arrives") {
  PeerHello hello;  // the smallest window a peer may announce
  hello.max_data = 1024;
  hello.stream_window = 1024;
  Rig rig({}, hello);
  const std::string first = pattern(1024);
  ClientStream c = open_client(rig, [&](UniqueFd& app) { app_send(app, first + "678"); });
  auto opens = rig.sent(FrameType::kOpen);
  REQUIRE(opens.size() == 1);
  OpenPayload open;
  std::string reason;
  REQUIRE(decode_open(opens[0].payload, &open, &reason));
  // The OPEN took the whole window.
  CHECK(std::string(open.first_bytes.begin(), open.first_bytes.end()) == first);
  rig.run_a_little();
  CHECK(rig.data_sent(1).empty());
  REQUIRE(rig.inject(test::u32_bytes(FrameType::kWindow, 1, 5)));
  rig.loop.end_batch();
  REQUIRE(rig.run_until([&] { return rig.data_sent(1) == "678"; }));
}

TEST_CASE("local: without session credit a read is parked until the peer's session WINDOW") {
  PeerHello hello;  // a session window of one stream window
  hello.max_data = 1024;
  hello.stream_window = 4096;
  hello.session_window = 4096;
  Rig rig({}, hello);
  ClientStream a = open_client(rig);
  ClientStream b = open_client(rig);
  // a takes the whole session budget.
  const std::string bulk = pattern(4096);
  app_send(a.pair.app, bulk);
  REQUIRE(rig.run_until([&] { return rig.data_sent(1).size() == 4096; }));
  CHECK(rig.data_sent(1) == bulk);
  // b reads, but cannot send: no session credit.
  app_send(b.pair.app, "waiting for credit");
  rig.run_a_little();
  CHECK(rig.data_sent(3).empty());
  CHECK(rig.session->counters().credit_stalls > 0);
  // The peer returns session credit: the parked bytes leave.
  REQUIRE(rig.inject(test::u32_bytes(FrameType::kWindow, 0, 1024)));
  rig.loop.end_batch();
  REQUIRE(rig.run_until([&] { return rig.data_sent(3) == "waiting for credit"; }));
}

// --- resets ---------------------------------------------------------------------------------

TEST_CASE("local: peer RESET reaches the app as ECONNRESET, not EOF") {
  Rig rig;
  ClientStream c = open_client(rig);
  REQUIRE(rig.inject(test::reset_bytes(1, ResetCode::kRefused)));
  rig.loop.end_batch();
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  AppRead r = app_read_to_end(rig, c.pair.app.get());
  CHECK(r.error == ECONNRESET);
  CHECK_FALSE(r.eof);
  CHECK(rig.session->stream_count() == 0);
  CHECK(rig.sent(FrameType::kReset).empty());  // nothing goes back for a peer's reset
  CHECK(failed(rig, metrics::StreamFailure::kTargetRefused) == 1);
}

TEST_CASE("local: a peer RESET parsed right behind its FIN wins, whatever runs before the batch ends") {
  Rig rig;
  ClientStream c = open_client(rig);
  app_send(c.pair.app, "request");
  REQUIRE(::shutdown(c.pair.app.get(), SHUT_WR) == 0);
  REQUIRE(rig.run_until([&] { return rig.sent(FrameType::kFin, 1).size() == 1; }));
  // FIN then RESET in one receive: both parsed, neither dispatched yet.
  REQUIRE(rig.inject(test::cat({test::fin_bytes(1), test::reset_bytes(1, ResetCode::kRefused)})));
  // Something of the stream's own runs first (here a takeover that failed
  // and carries on; a send completion in the same loop batch is the same):
  // it must not end the stream cleanly on the FIN alone.
  auto* stream = dynamic_cast<LocalStream*>(rig.host.first);
  REQUIRE(stream);
  stream->freeze();
  stream->thaw();
  rig.loop.end_batch();
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  AppRead r = app_read_to_end(rig, c.pair.app.get());
  CHECK(r.error == ECONNRESET);
  CHECK_FALSE(r.eof);
}

TEST_CASE("local: an app reset (SO_LINGER 0 close) sends RESET(cancel) to the peer") {
  Rig rig;
  ClientStream c = open_client(rig);
  rig.run_a_little();  // the receive is posted
  app_reset(c.pair.app);
  REQUIRE(rig.run_until([&] { return !rig.sent(FrameType::kReset, 1).empty(); }));
  auto resets = rig.sent(FrameType::kReset, 1);
  REQUIRE(resets.size() == 1);
  CHECK(resets[0].u32() == static_cast<uint32_t>(ResetCode::kCancel));
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(rig.session->stream_count() == 0);
  CHECK(failed(rig, metrics::StreamFailure::kReset) == 1);
  CHECK(rig.sent(FrameType::kFin).empty());
}

TEST_CASE("local: an app reset while the stream waits for credit is seen too (error poll)") {
  PeerHello hello;
  hello.max_data = 1024;
  hello.stream_window = 1024;
  Rig rig({}, hello);
  ClientStream c = open_client(rig, [](UniqueFd& app) { app_send(app, pattern(1024)); });
  rig.run_a_little();  // no credit: no receive, an error poll instead
  app_reset(c.pair.app);
  REQUIRE(rig.run_until([&] { return !rig.sent(FrameType::kReset, 1).empty(); }));
  CHECK(rig.sent(FrameType::kReset, 1)[0].u32() == static_cast<uint32_t>(ResetCode::kCancel));
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
}

TEST_CASE("local: StreamHost::reset_all resets every open stream both ways") {
  Rig rig;
  ClientStream a = open_client(rig);
  ClientStream b = open_client(rig);
  REQUIRE(rig.host.live == 2);
  REQUIRE(rig.session->stream_count() == 2);
  rig.run_a_little();
  rig.host.reset_all("drain timeout");
  rig.loop.end_batch();
  auto resets = rig.sent(FrameType::kReset);
  REQUIRE(resets.size() == 2);
  std::vector<uint32_t> ids;
  for (const auto& r : resets) {
    ids.push_back(r.id());
    CHECK(r.u32() == static_cast<uint32_t>(ResetCode::kShutdown));
  }
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<uint32_t>{1, 3});
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(app_read_to_end(rig, a.pair.app.get()).error == ECONNRESET);
  CHECK(app_read_to_end(rig, b.pair.app.get()).error == ECONNRESET);
  CHECK(rig.session->stream_count() == 0);
  CHECK(failed(rig, metrics::StreamFailure::kShutdown) == 2);
  // Again: nothing left to reset.
  rig.host.reset_all("again");
  CHECK(rig.sent(FrameType::kReset).size() == 2);
}

// --- the session goes away ------------------------------------------------------------------

TEST_CASE("local: a session lost mid-stream resets the app") {
  Rig rig;
  ClientStream c = open_client(rig);
  app_send(c.pair.app, "half a request");
  REQUIRE(rig.run_until([&] { return rig.data_sent(1) == "half a request"; }));
  rig.transport->fail("connection reset by peer");
  rig.transport = nullptr;  // the session lets go of it
  rig.loop.end_batch();
  CHECK(rig.owner.closed == 1);
  CHECK(rig.owner.end == SessionEnd::kTransportFailed);
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  AppRead r = app_read_to_end(rig, c.pair.app.get());
  CHECK(r.error == ECONNRESET);
  CHECK_FALSE(r.eof);
  CHECK(failed(rig, metrics::StreamFailure::kPeerGone) == 1);
}

TEST_CASE("local: a session lost mid-stream after the peer's FIN still resets the app") {
  Rig rig;
  ClientStream c = open_client(rig);
  REQUIRE(rig.inject(test::data_bytes(1, "reply")));
  REQUIRE(rig.inject(test::fin_bytes(1)));
  rig.loop.end_batch();
  // Our direction is not finished (no FIN sent): the stream cannot complete.
  rig.transport->fail("gone");
  rig.transport = nullptr;
  rig.loop.end_batch();
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  AppRead r = app_read_to_end(rig, c.pair.app.get());
  // The reply and the peer's FIN were delivered before the loss, so the app
  // reads them (a RST after FIN does not undo the EOF); its own direction
  // could not complete, which it learns when it writes: the reset is there.
  CHECK(r.bytes == "reply");
  CHECK((r.eof || r.error == ECONNRESET));
  int send_error = 0;
  for (int i = 0; i < 100 && send_error == 0; ++i) {
    if (::send(c.pair.app.get(), "x", 1, MSG_NOSIGNAL) < 0)
      send_error = errno;
    else
      std::this_thread::sleep_for(1ms);
  }
  CHECK((send_error == EPIPE || send_error == ECONNRESET));
  CHECK(failed(rig, metrics::StreamFailure::kPeerGone) == 1);
}

namespace {
SessionSettings wide_stream_window() {
  SessionSettings settings;
  tunnel_keys(settings).stream_window = 1024 * 1024;
  return settings;
}

// The app sends a request and its EOF, the peer answers with `body` and its
// FIN, then the session dies while most of `body` still waits for the app
// (small socket buffers: it cannot all be in the kernel yet).
ClientStream both_fins_then_session_lost(Rig& rig, const std::string& body) {
  ClientStream c = open_client(rig, {}, /*app_rcvbuf=*/4096, /*proxy_sndbuf=*/4096);
  app_send(c.pair.app, "request");
  REQUIRE(::shutdown(c.pair.app.get(), SHUT_WR) == 0);
  REQUIRE(rig.run_until([&] { return rig.sent(FrameType::kFin, 1).size() == 1; }));
  for (size_t off = 0; off < body.size(); off += kPayload)
    REQUIRE(rig.inject(test::data_bytes(1, std::string_view(body).substr(off, kPayload))));
  REQUIRE(rig.inject(test::fin_bytes(1)));
  rig.loop.end_batch();
  REQUIRE(rig.host.live == 1);  // still delivering: the app has not read yet
  rig.transport->fail("connection reset by peer");
  rig.transport = nullptr;
  rig.loop.end_batch();
  REQUIRE(rig.owner.closed == 1);
  return c;
}

// The app reads `body` whole, then a clean EOF; the stream ends.
void app_reads_all_then_eof(Rig& rig, ClientStream& c, const std::string& body) {
  AppRead r = app_read_to_end(rig, c.pair.app.get());
  CHECK(r.error == 0);
  CHECK(r.eof);
  CHECK(r.bytes.size() == body.size());
  CHECK(r.bytes == body);
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
}
}  // namespace

TEST_CASE("local: a session lost after both FINs lets the app read all data and a clean EOF") {
  Rig rig(wide_stream_window());
  const std::string body = pattern(512 * 1024);
  ClientStream c = both_fins_then_session_lost(rig, body);
  app_reads_all_then_eof(rig, c, body);
  CHECK(failed(rig, metrics::StreamFailure::kPeerGone) == 0);
}

TEST_CASE("local: a takeover moves a stream whose session ended after both FINs; the app still reads all, then EOF") {
  Rig rig(wide_stream_window());
  const std::string body = pattern(512 * 1024);
  ClientStream c = both_fins_then_session_lost(rig, body);
  // Detached, bytes still queued for the app: the old process's side.
  auto* old = dynamic_cast<LocalStream*>(rig.host.first);
  REQUIRE(old);
  REQUIRE_FALSE(old->session());
  old->freeze();
  REQUIRE(rig.run_until([&] { return old->quiet(); }));
  local::HandoverImages images;
  REQUIRE(old->export_image(&images, {}));
  REQUIRE(images.streams.size() == 1);
  const local::LocalStreamImage image = images.streams[0];
  CHECK(image.session < 0);  // no session goes with it
  CHECK(image.read_closed);
  CHECK(image.remote_fin);
  CHECK_FALSE(image.write_shut);
  CHECK_FALSE(image.to_socket.empty());
  UniqueFd moved(::dup(images.fds[image.fd]));
  REQUIRE(moved.valid());
  old->forget();
  rig.loop.end_batch();
  // The new process's side: what is queued goes out, then the write side shuts.
  REQUIRE(LocalStream::restore(rig.host, std::move(moved), image, nullptr, nullptr));
  app_reads_all_then_eof(rig, c, body);
}

// --- waiting for a session ------------------------------------------------------------------

TEST_CASE("local: a stream waiting for a session that is aborted resets the app") {
  Rig rig;
  TcpPair pair = tcp_pair();
  app_send(pair.app, "never sent");
  LocalStream* s = LocalStream::from_client(rig.host, std::move(pair.proxy), "lst", nullptr, "b", kTarget);
  local::StreamInfo info;
  REQUIRE(s->describe(&info));
  CHECK(info.state == "waiting");
  CHECK(info.stream_id == 0);
  s->abort(ResetCode::kPeerGone, "no session to peer b within connect_timeout_ms");
  CHECK(s->ending());
  rig.loop.end_batch();
  CHECK(rig.host.live == 0);
  AppRead r = app_read_to_end(rig, pair.app.get());
  CHECK(r.error == ECONNRESET);
  CHECK(failed(rig, metrics::StreamFailure::kNoSession) == 1);
  CHECK(rig.sent(FrameType::kOpen).empty());
}

namespace {
// A connector that cannot dial at all.
class DeadConnector final : public Connector {
 public:
  TransportKind kind() const override { return TransportKind::kTcp; }
  std::unique_ptr<Dial> dial(const Endpoint&, uint32_t, const SessionToken*, DialObserver*,
                             std::string* error) override {
    ++dials;
    *error = "connection refused";
    return nullptr;
  }
  int dials = 0;
};
}  // namespace

TEST_CASE("local: a stream a peer link gives up on (connect_timeout_ms) resets the app") {
  Rig rig;
  DeadConnector dead;
  PeerConfig peer;
  peer.name = "b";
  peer.address = "127.0.0.1";
  peer.tcp_port = 17471;
  std::string error;
  peer.tcp_endpoint = *make_tcp_endpoint(peer.address, peer.tcp_port, &error);
  TunnelConfig tunnel;
  tunnel.transport = TransportMode::kTcp;
  tunnel.connect_timeout_ms = 200;
  SessionSettings settings;
  settings.node = "a";
  Connectors connectors;
  connectors.tcp = &dead;
  PeerLink link(rig.loop, rig.pool, peer, settings, tunnel, connectors);

  TcpPair pair = tcp_pair();
  LocalStream* s = LocalStream::from_client(rig.host, std::move(pair.proxy), "lst", nullptr, "b", kTarget);
  link.submit(s);
  CHECK(dead.dials == 1);
  CHECK(rig.host.live == 1);
  link.tick(rig.loop.now() + 200ms);
  rig.loop.end_batch();
  CHECK(rig.host.live == 0);
  AppRead r = app_read_to_end(rig, pair.app.get());
  CHECK(r.error == ECONNRESET);
  CHECK(failed(rig, metrics::StreamFailure::kNoSession) == 1);
}

TEST_CASE("local: an app that closes cleanly before its stream got a session is reset on abort, not left open") {
  Rig rig;
  TcpPair pair = tcp_pair();
  LocalStream* s = LocalStream::from_client(rig.host, std::move(pair.proxy), "lst", nullptr, "b", kTarget);
  REQUIRE(::shutdown(pair.app.get(), SHUT_WR) == 0);
  s->abort(ResetCode::kShutdown, "sidecar is shutting down");
  rig.loop.end_batch();
  CHECK(rig.host.live == 0);
  AppRead r = app_read_to_end(rig, pair.app.get());
  CHECK(r.error == ECONNRESET);
  CHECK(failed(rig, metrics::StreamFailure::kShutdown) == 1);
}

// --- the far side: streams the peer opens, to a target here -----------------------------

namespace {
// A listening target on 127.0.0.1; `endpoint` is what the peer's OPEN names.
struct Target {
  UniqueFd listener;
  Endpoint endpoint;
  explicit Target(bool listening = true) {
    listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(listener.valid());
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    if (listening) REQUIRE(::listen(listener.get(), 4) == 0);  // else: bound only, a SYN gets RST
    socklen_t len = sizeof(a);
    REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    std::string error;
    auto ep = make_tcp_endpoint("127.0.0.1", ntohs(a.sin_port), &error);
    REQUIRE(ep);
    endpoint = *ep;
  }
  // Accepts a connection if one is there (the loop runs between calls).
  UniqueFd accept_one() {
    pollfd p{listener.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) != 1) return UniqueFd();
    return UniqueFd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  }
};

std::vector<uint8_t> open_frame(uint32_t id, std::string_view target, std::string_view first) {
  std::vector<uint8_t> out(kHeaderSize + 2 + target.size() + first.size());
  uint8_t* payload = out.data() + kHeaderSize + 2 + target.size();
  if (!first.empty()) std::memcpy(payload, first.data(), first.size());
  uint8_t* start = encode_open_before(payload, id, target, static_cast<uint32_t>(first.size()));
  REQUIRE(start == out.data());
  return out;
}

// An acceptor session whose peer opens streams to targets here.
struct FarRig : Rig {
  FarRig() : Rig({}, {}, Session::Role::kAcceptor) {
    owner.open_hook = [this](Session& session, uint32_t id, std::string_view target, const tunnel::StreamOrigin* origin,
                             ResetCode* refuse) -> Stream* {
      std::string error;
      auto ep = parse_endpoint(target, &error);
      if (!ep) {
        *refuse = ResetCode::kNotAllowed;
        return nullptr;
      }
      return LocalStream::to_target(host, session, id, *ep, origin, /*proxy_header=*/false, refuse);
    };
  }
};
}  // namespace

TEST_CASE("local: a stream the peer opens connects to its target, carrying the OPEN's first bytes") {
  FarRig rig;
  Target target;
  REQUIRE(rig.inject(open_frame(1, target.endpoint.to_string(), "first bytes")));
  rig.loop.end_batch();
  CHECK(rig.host.live == 1);
  CHECK(rig.metrics.streams_opened_inbound.value() == 1);
  UniqueFd conn;
  REQUIRE(rig.run_until([&] {
    if (!conn.valid()) conn = target.accept_one();
    return conn.valid();
  }));
  AppRead r;
  REQUIRE(rig.run_until([&] {
    app_read_some(conn.get(), r);
    return r.bytes.size() >= 11;
  }));
  CHECK(r.bytes == "first bytes");
  // The target answers and closes its side: DATA then FIN towards the peer.
  app_send(conn, "answer");
  REQUIRE(::shutdown(conn.get(), SHUT_WR) == 0);
  REQUIRE(rig.run_until([&] { return rig.sent(FrameType::kFin, 1).size() == 1; }));
  CHECK(rig.data_sent(1) == "answer");
  // The peer ends too: the target reads EOF; the stream is done, cleanly.
  REQUIRE(rig.inject(test::fin_bytes(1)));
  rig.loop.end_batch();
  AppRead rest = app_read_to_end(rig, conn.get());
  CHECK(rest.eof);
  CHECK(rest.error == 0);
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(rig.sent(FrameType::kReset).empty());
  CHECK(rig.metrics.target_streams_active.value() == 0);
}

TEST_CASE("local: a peer's FIN and data that arrive while the target connects are delivered after it connects") {
  FarRig rig;
  Target target;
  REQUIRE(rig.inject(open_frame(1, target.endpoint.to_string(), "")));
  REQUIRE(rig.inject(test::data_bytes(1, "queued while connecting")));
  REQUIRE(rig.inject(test::fin_bytes(1)));
  rig.loop.end_batch();
  UniqueFd conn;
  REQUIRE(rig.run_until([&] {
    if (!conn.valid()) conn = target.accept_one();
    return conn.valid();
  }));
  AppRead r = app_read_to_end(rig, conn.get());
  CHECK(r.bytes == "queued while connecting");
  CHECK(r.eof);
  CHECK(r.error == 0);
  ::shutdown(conn.get(), SHUT_WR);
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(rig.sent(FrameType::kReset).empty());
}

TEST_CASE("local: a target that refuses the connection sends RESET(refused) to the peer") {
  FarRig rig;
  Target target(/*listening=*/false);
  REQUIRE(rig.inject(open_frame(1, target.endpoint.to_string(), "hi")));
  rig.loop.end_batch();
  REQUIRE(rig.run_until([&] { return !rig.sent(FrameType::kReset, 1).empty(); }));
  CHECK(rig.sent(FrameType::kReset, 1)[0].u32() == static_cast<uint32_t>(ResetCode::kRefused));
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(failed(rig, metrics::StreamFailure::kTargetRefused) == 1);
  CHECK(rig.session->stream_count() == 0);
}

TEST_CASE("local: a peer RESET while the target connects ends the stream without a reply") {
  FarRig rig;
  Target target;
  REQUIRE(rig.inject(open_frame(1, target.endpoint.to_string(), "")));
  REQUIRE(rig.inject(test::reset_bytes(1, ResetCode::kCancel)));
  rig.loop.end_batch();
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(rig.sent(FrameType::kReset).empty());
  CHECK(rig.session->stream_count() == 0);
}

TEST_CASE("local: a target that never answers times out: RESET(connect-failed) to the peer") {
  FarRig rig;
  rig.host.connect_timeout_ms = 150;
  // Backlog 0, never accepted: once its queue is full, SYNs are dropped.
  Target target;
  REQUIRE(::listen(target.listener.get(), 0) == 0);
  sockaddr_storage addr = target.endpoint.addr;
  std::vector<UniqueFd> fillers;
  for (int i = 0; i < 4; ++i) {
    UniqueFd f(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    ::connect(f.get(), reinterpret_cast<sockaddr*>(&addr), target.endpoint.addr_len);
    fillers.push_back(std::move(f));
  }
  ::usleep(50 * 1000);  // let the handshakes that can complete do so
  auto start = Clock::now();
  REQUIRE(rig.inject(open_frame(1, target.endpoint.to_string(), "")));
  rig.loop.end_batch();
  REQUIRE(rig.run_until([&] { return !rig.sent(FrameType::kReset, 1).empty(); }));
  CHECK(Clock::now() - start >= 100ms);
  CHECK(rig.sent(FrameType::kReset, 1)[0].u32() == static_cast<uint32_t>(ResetCode::kConnectFailed));
  REQUIRE(rig.run_until([&] { return rig.host.live == 0; }));
  CHECK(failed(rig, metrics::StreamFailure::kTargetUnreachable) == 1);
}
