// SPDX-License-Identifier: Apache-2.0
// EventLoop with a real io_uring: completions, cancellation, the linked
// timeout of TimedConnect, the IoObject lifetime rule and Flushable batching.
// Network: loopback only.
#include "proxy/io/event_loop.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "proxy/io/acceptor.h"
#include "proxy/io/io_object.h"
#include "proxy/io/timed_connect.h"

using namespace rdmagw;
using namespace std::chrono_literals;

namespace {

void init_loop(EventLoop& loop) {
  std::string error;
  INFO(error);
  REQUIRE(loop.init(64, &error));
}

// Runs batches until `done()` holds: at most `rounds` batches and 5 s.
bool run_until(EventLoop& loop, const std::function<bool()>& done, int rounds = 500) {
  auto deadline = Clock::now() + 5s;
  for (int i = 0; i < rounds && Clock::now() < deadline; ++i) {
    if (done()) return true;
    loop.run_once(10ms);
  }
  return done();
}

struct Pipe {
  UniqueFd read, write;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0);
    read.reset(fds[0]);
    write.reset(fds[1]);
  }
};

// A plain (non-IoObject) callback target.
struct Callback {
  int calls = 0;
  int last_res = 1;
  void on_done(int res, uint32_t) {
    ++calls;
    last_res = res;
  }
};

// An IoObject that counts its deletion and can post a poll on a pipe. What
// it sees is kept outside it, so that tests can read it after it is gone.
struct Record {
  int deaths = 0;
  int completions = 0;
  int last_res = 0;
  int deaths_seen_in_callback = -1;
};

class Probe final : public IoObject {
 public:
  Probe(EventLoop& loop, int* deaths, Record* record = nullptr) : IoObject(loop), deaths_(deaths), record_(record) {
    op_ = IoOp::bind<&Probe::on_poll>(this);
  }
  void poll(int fd) {
    io_uring_sqe* s = loop().sqe(&op_);
    io_uring_prep_poll_add(s, fd, POLLIN);
  }
  void cancel() { loop().cancel(&op_); }
  // Set: the callback retires this object (retire from inside its own call).
  bool retire_in_callback = false;

 private:
  ~Probe() override { ++*deaths_; }
  void on_poll(int res, uint32_t) {
    if (record_) {
      ++record_->completions;
      record_->last_res = res;
      record_->deaths_seen_in_callback = *deaths_;
    }
    if (retire_in_callback) retire();
  }
  int* deaths_;
  Record* record_;
  IoOp op_;
};

// Owns another IoObject through an IoPtr: its destructor retires the child.
class Parent final : public IoObject {
 public:
  Parent(EventLoop& loop, int* deaths, IoPtr<Probe> child)
      : IoObject(loop), deaths_(deaths), child_(std::move(child)) {}

 private:
  ~Parent() override { ++*deaths_; }  // child_ is retired right after this body
  int* deaths_;
  IoPtr<Probe> child_;
};

// Holds a TimedConnect, as its owners do (an IoObject its ops count in).
class Connecter final : public IoObject {
 public:
  explicit Connecter(EventLoop& loop) : IoObject(loop) { connect_.bind<&Connecter::on_connected>(this); }
  void start(const sockaddr_in& to, uint32_t timeout_ms) {
    fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    REQUIRE(fd_.valid());
    sockaddr_storage ss{};
    std::memcpy(&ss, &to, sizeof(to));
    connect_.start(loop(), fd_.get(), ss, sizeof(to), timeout_ms);
  }
  void cancel() { connect_.cancel(loop()); }
  bool pending() const { return connect_.pending(); }
  int calls = 0;
  int error = -1;
  // Gives the connected socket away (so that it keeps a backlog slot).
  UniqueFd take_fd() { return std::move(fd_); }

 private:
  ~Connecter() override = default;
  void on_connected(int err) {
    ++calls;
    error = err;
  }
  UniqueFd fd_;
  TimedConnect connect_;
};

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A TCP socket bound to 127.0.0.1 on a kernel-chosen port; listening if asked.
UniqueFd bound_socket(int backlog, uint16_t* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_in a = loopback(0);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  if (backlog >= 0) REQUIRE(::listen(fd.get(), backlog) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
  *port = ntohs(a.sin_port);
  return fd;
}

class CountingFlush final : public Flushable {
 public:
  explicit CountingFlush(std::function<void()> body = {}) : body_(std::move(body)) {}
  void flush() override {
    ++runs;
    if (body_) body_();
  }
  int runs = 0;

 private:
  std::function<void()> body_;
};

}  // namespace

// --- completions and cancellation ----------------------------------------------------

TEST_CASE("io: a completed IoOp calls its owner back with the result") {
  EventLoop loop;
  init_loop(loop);
  Callback cb;
  IoOp op = IoOp::bind<&Callback::on_done>(&cb);
  CHECK(op.counted == nullptr);  // not an IoObject: counts nowhere
  io_uring_prep_nop(loop.sqe(&op));
  CHECK(cb.calls == 0);  // nothing runs at submission
  REQUIRE(run_until(loop, [&] { return cb.calls > 0; }));
  CHECK(cb.calls == 1);
  CHECK(cb.last_res == 0);
}

TEST_CASE("io: a pipe read completes with the bytes read") {
  EventLoop loop;
  init_loop(loop);
  Pipe pipe;
  Callback cb;
  IoOp op = IoOp::bind<&Callback::on_done>(&cb);
  char buf[16];
  io_uring_prep_read(loop.sqe(&op), pipe.read.get(), buf, sizeof(buf), 0);
  loop.run_once(0ms);
  CHECK(cb.calls == 0);
  REQUIRE(::write(pipe.write.get(), "abc", 3) == 3);
  REQUIRE(run_until(loop, [&] { return cb.calls > 0; }));
  CHECK(cb.last_res == 3);
  CHECK(std::string(buf, 3) == "abc");
}

TEST_CASE("io: cancel() of a pending poll delivers -ECANCELED") {
  EventLoop loop;
  init_loop(loop);
  Pipe pipe;
  Callback cb;
  IoOp op = IoOp::bind<&Callback::on_done>(&cb);
  io_uring_prep_poll_add(loop.sqe(&op), pipe.read.get(), POLLIN);
  loop.run_once(0ms);  // submitted, and nothing to read: stays pending
  REQUIRE(cb.calls == 0);
  loop.cancel(&op);
  REQUIRE(run_until(loop, [&] { return cb.calls > 0; }));
  CHECK(cb.calls == 1);
  CHECK(cb.last_res == -ECANCELED);
  // The cancel request's own completion carries no op: nothing else is called.
  loop.run_once(20ms);
  CHECK(cb.calls == 1);
}

TEST_CASE("io: run_once with a timeout returns when nothing completes, and updates now()") {
  EventLoop loop;
  init_loop(loop);
  Clock::time_point before_now = loop.now();
  auto start = Clock::now();
  loop.run_once(30ms);
  auto elapsed = Clock::now() - start;
  CHECK(elapsed >= 25ms);
  CHECK(elapsed < 2s);
  CHECK(loop.now() > before_now);
  CHECK(loop.now() >= start);
  // A zero timeout does not block.
  start = Clock::now();
  loop.run_once(0ms);
  CHECK(Clock::now() - start < 500ms);
}

// An idle loop sleeps from one tick to the next. Its waits were once cut to
// whole milliseconds: the last one ended early, and the loop spun through
// zero-length waits (about a hundred) until the tick was due.
TEST_CASE("io: an idle loop wakes about once per tick, not in a spin before each") {
  EventLoop loop;
  init_loop(loop);
  int ticks = 0;
  loop.run(5ms, [&] {
    if (++ticks == 40) loop.stop();
  });
  INFO("batches: " << loop.batches());
  CHECK(loop.batches() <= 3 * 40);
}

// --- TimedConnect: connect + linked timeout -------------------------------------------

TEST_CASE("io: TimedConnect reports success against a loopback listener") {
  EventLoop loop;
  init_loop(loop);
  uint16_t port = 0;
  UniqueFd listener = bound_socket(16, &port);
  auto c = make_io<Connecter>(loop);
  c->start(loopback(port), 2000);
  CHECK(c->pending());
  REQUIRE(run_until(loop, [&] { return c->calls > 0; }));
  CHECK(c->error == 0);
  CHECK_FALSE(c->pending());
  // The linked timeout's completion (-ECANCELED) follows; it calls nothing.
  REQUIRE(run_until(loop, [&] { return c->ops_in_flight() == 0; }));
  CHECK(c->calls == 1);
}

TEST_CASE("io: TimedConnect to a loopback port nobody listens on reports ECONNREFUSED") {
  EventLoop loop;
  init_loop(loop);
  uint16_t port = 0;
  // Bound but not listening: the port stays ours, and a SYN to it gets a RST.
  UniqueFd holder = bound_socket(-1, &port);
  auto c = make_io<Connecter>(loop);
  c->start(loopback(port), 2000);
  REQUIRE(run_until(loop, [&] { return c->calls > 0; }));
  CHECK(c->error == ECONNREFUSED);
  REQUIRE(run_until(loop, [&] { return c->ops_in_flight() == 0; }));
}

TEST_CASE("io: TimedConnect's linked timeout fires as ETIMEDOUT when the listener's backlog is full") {
  EventLoop loop;
  init_loop(loop);
  uint16_t port = 0;
  // Backlog 0, never accepted: once its accept queue holds what it can, the
  // kernel drops further SYNs, so the next connect can only time out.
  UniqueFd listener = bound_socket(0, &port);
  std::vector<UniqueFd> fillers;
  int timed_out_after = -1;
  for (int attempt = 0; attempt < 8 && timed_out_after < 0; ++attempt) {
    auto c = make_io<Connecter>(loop);
    auto start = Clock::now();
    c->start(loopback(port), 150);
    REQUIRE(run_until(loop, [&] { return c->calls > 0; }));
    if (c->error == 0) {
      fillers.push_back(c->take_fd());  // it holds a slot of the queue: try again
      continue;
    }
    REQUIRE(c->error == ETIMEDOUT);
    auto elapsed = Clock::now() - start;
    CHECK(elapsed >= 100ms);  // not before the deadline...
    CHECK(elapsed < 3s);      // ...and not much after it
    timed_out_after = attempt;
    REQUIRE(run_until(loop, [&] { return c->ops_in_flight() == 0; }));
  }
  INFO("connections that got through first: " << fillers.size());
  REQUIRE(timed_out_after >= 0);
  CHECK(timed_out_after >= 1);  // the queue took at least one first
}

TEST_CASE("io: a cancelled TimedConnect does not call back, and its ops still count until they complete") {
  EventLoop loop;
  init_loop(loop);
  uint16_t port = 0;
  UniqueFd listener = bound_socket(0, &port);
  // Fill the queue so the connect below stays pending.
  std::vector<UniqueFd> fillers;
  for (int i = 0; i < 4; ++i) {
    UniqueFd f(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in a = loopback(port);
    ::connect(f.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
    fillers.push_back(std::move(f));
  }
  loop.run_once(50ms);
  auto c = make_io<Connecter>(loop);
  c->start(loopback(port), 5000);
  loop.run_once(20ms);
  if (c->calls > 0) {
    WARN("the connect completed before it could be cancelled; nothing to check");
  } else {
    CHECK(c->ops_in_flight() == 2);  // connect and its linked timeout
    c->cancel();
    Connecter* raw = c.get();
    REQUIRE(run_until(loop, [&] { return raw->ops_in_flight() == 0; }));
    CHECK(raw->calls == 0);
    CHECK_FALSE(raw->pending());
  }
}

// --- the IoObject lifetime rule ------------------------------------------------------

TEST_CASE("io: a retired idle object is deleted at end_batch(), not inside retire()") {
  EventLoop loop;
  int deaths = 0;
  auto p = make_io<Probe>(loop, &deaths);
  CHECK(loop.live_objects() == 1);
  Probe* raw = p.get();
  p.reset();  // retire()
  CHECK(deaths == 0);
  CHECK(raw->retired());
  CHECK(loop.live_objects() == 1);
  raw->retire();  // idempotent
  loop.end_batch();
  CHECK(deaths == 1);
  CHECK(loop.live_objects() == 0);
  loop.end_batch();
  CHECK(deaths == 1);
}

TEST_CASE("io: a retired object with an op in flight lives until the op completes and the batch ends") {
  EventLoop loop;
  init_loop(loop);
  Pipe pipe;
  int deaths = 0;
  Record record;
  auto p = make_io<Probe>(loop, &deaths, &record);
  p->poll(pipe.read.get());
  CHECK(p->ops_in_flight() == 1);
  p.reset();
  loop.end_batch();
  loop.run_once(20ms);
  loop.run_once(0ms);
  CHECK(deaths == 0);  // retired, but its poll is still in flight
  CHECK(loop.live_objects() == 1);
  REQUIRE(::write(pipe.write.get(), "x", 1) == 1);
  REQUIRE(run_until(loop, [&] { return deaths > 0; }));
  CHECK(record.completions == 1);
  CHECK(record.deaths_seen_in_callback == 0);  // alive during its own callback
  CHECK(deaths == 1);
  CHECK(loop.live_objects() == 0);
}

TEST_CASE("io: an object that retires itself in its own callback is deleted after the callback") {
  EventLoop loop;
  init_loop(loop);
  Pipe pipe;
  int deaths = 0;
  Record record;
  // Not owned by an IoPtr: the callback retires it.
  Probe* p = make_io<Probe>(loop, &deaths, &record).release();
  p->retire_in_callback = true;
  p->poll(pipe.read.get());
  loop.run_once(0ms);
  CHECK(deaths == 0);
  REQUIRE(::write(pipe.write.get(), "x", 1) == 1);
  REQUIRE(run_until(loop, [&] { return record.completions > 0; }));
  // The batch that ran the callback also deleted it, after the callback.
  CHECK(record.deaths_seen_in_callback == 0);
  CHECK(deaths == 1);
  CHECK(loop.live_objects() == 0);
}

TEST_CASE("io: a retired object whose op completes is deleted at the end of the batch, not during dispatch") {
  EventLoop loop;
  init_loop(loop);
  Pipe pipe_a, pipe_b;
  int deaths = 0;
  Record watcher;  // an object completing in the same batch looks at the counter
  auto a = make_io<Probe>(loop, &deaths);
  auto b = make_io<Probe>(loop, &deaths, &watcher);
  a->poll(pipe_a.read.get());
  b->poll(pipe_b.read.get());
  loop.run_once(0ms);
  a.reset();  // retired with its poll in flight
  // Both become ready before the next wait: their completions land in one batch.
  REQUIRE(::write(pipe_a.write.get(), "x", 1) == 1);
  REQUIRE(::write(pipe_b.write.get(), "x", 1) == 1);
  REQUIRE(run_until(loop, [&] { return watcher.completions > 0; }));
  CHECK(deaths == 1);
  // Whatever the order of the two completions, a was not deleted while the batch dispatched.
  CHECK(watcher.deaths_seen_in_callback == 0);
}

TEST_CASE("io: a cancelled op of a retired object completes, then the object is deleted") {
  EventLoop loop;
  init_loop(loop);
  Pipe pipe;
  int deaths = 0;
  auto p = make_io<Probe>(loop, &deaths);
  Probe* raw = p.get();
  raw->poll(pipe.read.get());
  loop.run_once(0ms);
  raw->cancel();  // the owner stops its I/O first, then lets go
  p.reset();
  REQUIRE(run_until(loop, [&] { return deaths > 0; }));
  CHECK(loop.live_objects() == 0);
}

TEST_CASE("io: deleting runs down a destructor chain (an object retiring another it owns)") {
  EventLoop loop;
  int deaths = 0;
  auto child = make_io<Probe>(loop, &deaths);
  Probe* child_raw = child.get();
  auto parent = make_io<Parent>(loop, &deaths, std::move(child));
  CHECK(loop.live_objects() == 2);
  CHECK_FALSE(child_raw->retired());
  parent.reset();
  CHECK(deaths == 0);
  loop.end_batch();  // the parent dies, retiring the child, which dies in the same end_batch
  CHECK(deaths == 2);
  CHECK(loop.live_objects() == 0);
}

TEST_CASE("io: a child retired by a dying parent while its op is in flight waits for the op") {
  EventLoop loop;
  init_loop(loop);
  Pipe pipe;
  int deaths = 0;
  auto child = make_io<Probe>(loop, &deaths);
  child->poll(pipe.read.get());
  auto parent = make_io<Parent>(loop, &deaths, std::move(child));
  parent.reset();
  loop.run_once(0ms);
  CHECK(deaths == 1);  // the parent
  CHECK(loop.live_objects() == 1);
  REQUIRE(::write(pipe.write.get(), "x", 1) == 1);
  REQUIRE(run_until(loop, [&] { return deaths == 2; }));
  CHECK(loop.live_objects() == 0);
}

TEST_CASE("io: shut_down() deletes every live object, retired or not, and ends their I/O") {
  int deaths = 0;
  Pipe pipe;
  {
    EventLoop loop;
    init_loop(loop);
    auto idle = make_io<Probe>(loop, &deaths);  // owned, not retired
    auto busy = make_io<Probe>(loop, &deaths);  // owned, an op in flight
    busy->poll(pipe.read.get());
    auto retired_busy = make_io<Probe>(loop, &deaths);  // retired, an op in flight
    retired_busy->poll(pipe.read.get());
    retired_busy.reset();
    auto retired_idle = make_io<Probe>(loop, &deaths);  // retired, not yet deleted
    retired_idle.reset();
    // A parent that owns a child created before it (as a session owns its
    // transport): its destructor retires the child during shut_down().
    auto child = make_io<Probe>(loop, &deaths);
    child->poll(pipe.read.get());
    auto parent = make_io<Parent>(loop, &deaths, std::move(child));
    loop.run_once(0ms);  // submit the polls; retired_idle goes here
    CHECK(deaths == 1);
    CHECK(loop.live_objects() == 5);
    // Owners let go of what they still hold (as a worker does), without a batch end.
    (void)idle.release();
    (void)busy.release();
    (void)parent.release();
    loop.shut_down();
    CHECK(deaths == 6);
    CHECK(loop.live_objects() == 0);
    // Again (the destructor calls it too): nothing more happens.
    loop.shut_down();
    CHECK(deaths == 6);
  }
  CHECK(deaths == 6);
}

TEST_CASE("io: live_objects() counts construction and deletion") {
  EventLoop loop;
  int deaths = 0;
  CHECK(loop.live_objects() == 0);
  std::vector<IoPtr<Probe>> v;
  for (int i = 0; i < 5; ++i) v.push_back(make_io<Probe>(loop, &deaths));
  CHECK(loop.live_objects() == 5);
  v.erase(v.begin() + 1, v.begin() + 3);
  CHECK(loop.live_objects() == 5);  // retired, deleted at the end of the batch
  loop.end_batch();
  CHECK(loop.live_objects() == 3);
  CHECK(deaths == 2);
  v.clear();
  loop.end_batch();
  CHECK(loop.live_objects() == 0);
}

// --- Flushable --------------------------------------------------------------------------

TEST_CASE("io: a Flushable runs once per batch however often it asked") {
  EventLoop loop;
  CountingFlush f;
  loop.request_flush(&f);
  loop.request_flush(&f);
  loop.request_flush(&f);
  CHECK(f.runs == 0);
  loop.end_batch();
  CHECK(f.runs == 1);
  loop.end_batch();
  CHECK(f.runs == 1);  // not asked again
  loop.request_flush(&f);
  loop.end_batch();
  CHECK(f.runs == 2);
}

TEST_CASE("io: flushes queued by a flush run in the same end_batch") {
  EventLoop loop;
  CountingFlush second;
  CountingFlush* first_ptr = nullptr;
  CountingFlush first([&] {
    if (first_ptr->runs > 1) return;
    loop.request_flush(&second);
    loop.request_flush(first_ptr);  // itself again, from its own flush
  });
  first_ptr = &first;
  loop.request_flush(&first);
  loop.end_batch();
  CHECK(first.runs == 2);
  CHECK(second.runs == 1);
  loop.end_batch();
  CHECK(first.runs == 2);
  CHECK(second.runs == 1);
}

TEST_CASE("io: a flush queued from run_once's batch runs before the batch returns") {
  EventLoop loop;
  init_loop(loop);
  CountingFlush later;
  struct Kick {
    EventLoop* loop;
    Flushable* f;
    void on_done(int, uint32_t) { loop->request_flush(f); }
  } kick{&loop, &later};
  IoOp op = IoOp::bind<&Kick::on_done>(&kick);
  io_uring_prep_nop(loop.sqe(&op));
  REQUIRE(run_until(loop, [&] { return later.runs > 0; }));
  CHECK(later.runs == 1);
}

TEST_CASE("io: a Flushable destroyed while queued is unqueued, not flushed") {
  EventLoop loop;
  auto* gone = new CountingFlush;
  CountingFlush kept;
  loop.request_flush(gone);
  loop.request_flush(&kept);
  delete gone;  // unqueues itself
  loop.end_batch();
  CHECK(kept.runs == 1);
}

TEST_CASE("io: a Flushable destroyed by another flush of the same round is skipped") {
  EventLoop loop;
  CountingFlush* victim = new CountingFlush;
  CountingFlush killer([&] {
    // Destroys a flushable queued in the same round, before it ran.
    delete victim;
    victim = nullptr;
  });
  loop.request_flush(&killer);
  loop.request_flush(victim);
  loop.end_batch();
  CHECK(killer.runs == 1);
  CHECK(victim == nullptr);
}

// --- run() and the ring's features ----------------------------------------------------------

TEST_CASE("io: run() ticks at its interval until a tick calls stop()") {
  EventLoop loop;
  init_loop(loop);
  int ticks = 0;
  auto start = Clock::now();
  loop.run(10ms, [&] {
    if (++ticks == 3) loop.stop();
  });
  auto elapsed = Clock::now() - start;
  CHECK(ticks == 3);
  CHECK(elapsed >= 25ms);
  CHECK(elapsed < 3s);
}

TEST_CASE("io: run() ends the batch after each tick (objects retired by a tick are deleted)") {
  EventLoop loop;
  init_loop(loop);
  int deaths = 0;
  auto p = make_io<Probe>(loop, &deaths);
  int ticks = 0;
  int deaths_at_second_tick = -1;
  loop.run(5ms, [&] {
    ++ticks;
    if (ticks == 1) p.reset();
    if (ticks == 2) {
      deaths_at_second_tick = deaths;
      loop.stop();
    }
  });
  CHECK(deaths_at_second_tick == 1);
}

TEST_CASE("io: the ring reports the features it was set up with") {
  EventLoop loop;
  init_loop(loop);
  std::string d = loop.features().describe();
  if (baseline_io_uring_forced()) {
    // RDMAGW_IO_URING=baseline: the 5.10 feature set (ctest runs io_tests that way too).
    CHECK(d == "basic");
    CHECK_FALSE(loop.features().defer_taskrun);
    CHECK_FALSE(loop.features().coop_taskrun);
  } else {
    CHECK((d == "basic" || d == "coop-taskrun,poll-first" || d == "single-issuer,defer-taskrun,poll-first"));
    CHECK(loop.features().poll_first == (d != "basic"));
  }
}

// --- a broken ring ----------------------------------------------------------------

namespace {
// The fd of this process's io_uring (the ring's own fd is private to liburing).
int find_ring_fd() {
  for (int fd = 3; fd < 1024; ++fd) {
    char link[64];
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = 0;
    if (std::string(link) == "anon_inode:[io_uring]") return fd;
  }
  return -1;
}
}  // namespace

TEST_CASE("a broken ring ends the process with a message instead of spinning silently") {
  // In a child: its death must not take the test binary with it.
  int out[2];
  REQUIRE(pipe(out) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 2);
    // The abort is the child's own, not a test failure for Catch's handler
    // (inherited through fork) to report, which allocates in a signal handler.
    signal(SIGABRT, SIG_DFL);
    EventLoop loop;
    std::string error;
    if (!loop.init(8, &error)) _exit(3);
    int fd = find_ring_fd();
    if (fd < 0) _exit(4);
    // Another file on the ring's number: io_uring_enter then fails (EOPNOTSUPP/EBADF).
    int other = open("/dev/null", O_RDONLY);
    dup2(other, fd);
    loop.run_once(10ms);
    _exit(0);  // returned: the old silent behaviour
  }
  close(out[1]);
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child stderr: " << text);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(text.find("io_uring_submit_and_wait") != std::string::npos);
}

// --- acceptors and late submissions (from a review of the lifetime rule) --------

namespace {
struct LoopbackListener {
  UniqueFd fd;
  sockaddr_in addr{};
  LoopbackListener() {
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    REQUIRE(fd.valid());
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd.get(), 16) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  }
  UniqueFd connect_client() const {
    UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(c.valid());
    REQUIRE(::connect(c.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    return c;
  }
};

// An IoObject that can post a poll; counts its deletion.
class Poller final : public IoObject {
 public:
  Poller(EventLoop& loop, int* deaths, int* completions) : IoObject(loop), deaths_(deaths), completions_(completions) {
    op_ = IoOp::bind<&Poller::on_poll>(this);
  }
  void poll(int fd) {
    io_uring_sqe* s = loop().sqe(&op_);
    io_uring_prep_poll_add(s, fd, POLLIN);
  }

 private:
  ~Poller() override { ++*deaths_; }
  void on_poll(int, uint32_t) { ++*completions_; }
  int* deaths_;
  int* completions_;
  IoOp op_;
};

}  // namespace

TEST_CASE("a connection accepted while the acceptor stops is reset, never closed with a clean EOF") {
  EventLoop loop;
  init_loop(loop);
  LoopbackListener l;
  int handled = 0;
  auto acceptor = make_io<Acceptor>(loop, l.fd.get(), "lst", [&](UniqueFd) { ++handled; });
  UniqueFd client = l.connect_client();  // waits in the backlog
  acceptor->start();
  loop.reserve(64);  // submits the accept: it completes at once (a connection is waiting)
  acceptor->stop();  // the owner lets go now (drain, reload)
  acceptor.reset();
  for (int i = 0; i < 5; ++i) loop.run_once(10ms);
  CHECK(handled == 0);
  pollfd p{client.get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 1000) == 1);
  char b;
  ssize_t n = ::recv(client.get(), &b, 1, MSG_DONTWAIT);
  int err = n < 0 ? errno : 0;
  INFO("recv returned " << n << " errno " << err);
  // What the SO_LINGER rule promises: a reset.
  CHECK(n == -1);
  CHECK(err == ECONNRESET);
  loop.shut_down();
}

TEST_CASE("an op submitted after an idle object was retired keeps the object alive until it completes") {
  EventLoop loop;
  init_loop(loop);
  int fds[2];
  REQUIRE(::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0);
  UniqueFd r(fds[0]), w(fds[1]);
  int deaths = 0, completions = 0;
  auto* p = new Poller(loop, &deaths, &completions);
  p->retire();       // idle: condemned at once
  p->poll(r.get());  // a late submission (e.g. a callback path that forgot its closing_ check)
  CHECK(p->ops_in_flight() == 1);
  loop.end_batch();
  // Not deleted with its poll still in the kernel.
  CHECK(deaths == 0);
  REQUIRE(::write(w.get(), "x", 1) == 1);
  for (int i = 0; i < 3; ++i) loop.run_once(10ms);
  CHECK(completions == 1);
  CHECK(deaths == 1);  // deleted once the op completed
  loop.shut_down();
}
