// SPDX-License-Identifier: Apache-2.0
// The local legs' BPF programs (proxy/local/bpf/local_redirect.bpf.c) on real
// loopback sockets of this process, moved into a cgroup v2 of its own for the
// test: bytes arrive whole and in order across switches between redirection
// and TCP, what a writer may have redirected to a reader that does not read
// stays within the bound, and a flow rdmagw sends is redirected and shows as
// the reader's unread memory (SocketMemory). Needs root, cgroup v2 and a
// kernel with sock_ops, sk_msg and SOCKHASH (this machine kind has them:
// the test fails, not skips, when they are missing).
#include "proxy/local/local_redirect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "proxy/local/redirected_leg.h"
#include "proxy/local/socket_memory.h"

using namespace rdmagw;
using namespace rdmagw::local;

namespace {

// Where cgroup v2 is mounted (the unified hierarchy), from /proc/mounts.
std::string cgroup2_mount() {
  std::ifstream mounts("/proc/mounts");
  std::string device, path, type, rest;
  while (mounts >> device >> path >> type && std::getline(mounts, rest))
    if (type == "cgroup2") return path;
  return {};
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  REQUIRE(out.good());
}

// This process in a cgroup v2 of its own for the test's lifetime; moved
// back, and the cgroup removed, at the end.
struct TestCgroup {
  std::string mount, path, before;
  TestCgroup() {
    mount = cgroup2_mount();
    REQUIRE(!mount.empty());
    std::ifstream self("/proc/self/cgroup");
    std::string line;
    while (std::getline(self, line))
      if (line.rfind("0::", 0) == 0) before = mount + line.substr(3);
    path = mount + "/rdmagw-redirect-test-" + std::to_string(::getpid());
    REQUIRE((::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST));
    write_file(path + "/cgroup.procs", std::to_string(::getpid()));
  }
  ~TestCgroup() {
    std::ofstream(before + "/cgroup.procs") << ::getpid();
    ::rmdir(path.c_str());
  }
};

struct Connection {
  UniqueFd client, server;  // client: the application; server: rdmagw's accepted end
};

Connection connect_pair(uint16_t port) {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int on = 1;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::listen(listener.get(), 4) == 0);
  Connection c;
  c.client = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(c.client.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  c.server = UniqueFd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(c.server.valid());
  return c;
}

uint16_t free_port() {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t length = sizeof(a);
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &length);
  return ntohs(a.sin_port);
}

// Byte `offset` of the test's stream: a position a misplaced byte cannot keep.
uint8_t stream_byte(uint64_t offset) { return static_cast<uint8_t>((offset * 2654435761ull) >> 7); }

std::unique_ptr<LocalRedirect> attached(const TestCgroup& cgroup, uint64_t bound) {
  std::string why;
  auto r = LocalRedirect::attach({cgroup.path, bound}, &why);
  INFO(why);
  REQUIRE(r);
  return r;
}

// The programs attached to a cgroup of the test's own, for one port.
struct Redirected {
  TestCgroup cgroup;
  std::unique_ptr<LocalRedirect> redirect;
  uint16_t port = free_port();
  explicit Redirected(uint64_t bound) : redirect(attached(cgroup, bound)) {
    std::string why;
    if (!redirect->add_port(port, &why)) FAIL(why);
  }
};

// Sends `n` bytes of the stream from `offset` in chunks of random sizes, of
// at most `largest` bytes.
void send_stream(int fd, uint64_t offset, uint64_t n, std::mt19937& random, size_t largest = SIZE_MAX) {
  const size_t sizes[] = {1, 7, 64, 1000, 4096, 65536, 300000};
  std::vector<uint8_t> chunk;
  for (uint64_t end = offset + n; offset < end;) {
    size_t k = std::min<uint64_t>(std::min(sizes[random() % 7], largest), end - offset);
    chunk.resize(k);
    for (size_t i = 0; i < k; ++i) chunk[i] = stream_byte(offset + i);
    REQUIRE(::send(fd, chunk.data(), k, MSG_NOSIGNAL) == static_cast<ssize_t>(k));
    offset += k;
  }
}

// Reads `n` bytes of the stream (as rdmagw would: its counter advanced by
// each read), in reads of random sizes; returns the first offset whose byte
// is not the stream's, or UINT64_MAX.
uint64_t read_stream(int fd, uint64_t offset, uint64_t n, std::atomic<uint64_t>& counter, std::mt19937& random) {
  const size_t wants[] = {1, 100, 5000, 65536, 1 << 20};
  std::vector<uint8_t> buffer(1 << 20);
  uint64_t first_bad = UINT64_MAX;
  for (uint64_t end = offset + n; offset < end;) {
    ssize_t got = ::recv(fd, buffer.data(), std::min<uint64_t>(wants[random() % 5], end - offset), 0);
    REQUIRE(got > 0);
    for (ssize_t k = 0; k < got && first_bad == UINT64_MAX; ++k)
      if (buffer[static_cast<size_t>(k)] != stream_byte(offset + static_cast<uint64_t>(k)))
        first_bad = offset + static_cast<uint64_t>(k);
    offset += static_cast<uint64_t>(got);
    counter.fetch_add(static_cast<uint64_t>(got), std::memory_order_relaxed);
  }
  return first_bad;
}

}  // namespace

TEST_CASE("redirected bytes arrive whole and in order across switches to TCP and back", "[redirect]") {
  constexpr uint64_t kBound = 4096;  // small: the writer crosses it again and again
  Redirected r(kBound);
  auto& redirect = r.redirect;
  Connection c = connect_pair(r.port);
  auto key = redirect_key_of(c.server.get());
  REQUIRE(key);
  std::atomic<uint64_t>* counter = redirect->admit_reader(*key);
  REQUIRE(counter);
  std::mt19937 writer_random(1), reader_random(2);
  uint64_t offset = 0, first_bad = UINT64_MAX;

  // Rounds: the writer sends past the bound while the reader waits (so the
  // flow goes to TCP with bytes still queued on the redirect side), then
  // the reader reads everything (so the flow redirects again). Chunks no
  // larger than the bound: each round crosses it, once.
  constexpr int kRounds = 200;
  LocalRedirectStats before = redirect->stats();
  for (int round = 0; round < kRounds && first_bad == UINT64_MAX; ++round) {
    uint64_t burst = kBound * (3 + writer_random() % 3) + writer_random() % kBound;
    send_stream(c.client.get(), offset, burst, writer_random, kBound);
    first_bad = read_stream(c.server.get(), offset, burst, *counter, reader_random);
    offset += burst;
  }
  LocalRedirectStats rounds = redirect->stats();
  INFO("rounds: redirected " << rounds.bytes_redirected - before.bytes_redirected << " B, by TCP "
                             << rounds.bytes_tcp - before.bytes_tcp << " B, switches to TCP "
                             << rounds.flows_to_tcp - before.flows_to_tcp);
  CHECK(first_bad == UINT64_MAX);
  CHECK(rounds.flows_to_tcp - before.flows_to_tcp == kRounds);  // each round switched, and came back

  // Then both at once, each with pauses of its own: whatever interleaving
  // the two threads make, no byte is out of place.
  constexpr uint64_t kTotal = 24ull << 20;
  std::thread writer([&] {
    std::mt19937 random(3);
    for (uint64_t sent = 0; sent < kTotal;) {
      if (random() % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
      uint64_t n = std::min<uint64_t>(1 + random() % (256 * 1024), kTotal - sent);
      send_stream(c.client.get(), offset + sent, n, random);
      sent += n;
    }
  });
  uint64_t read = 0;
  while (read < kTotal && first_bad == UINT64_MAX) {
    if (reader_random() % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(reader_random() % 2000));
    uint64_t n = std::min<uint64_t>(1 + reader_random() % (256 * 1024), kTotal - read);
    first_bad = read_stream(c.server.get(), offset + read, n, *counter, reader_random);
    read += n;
  }
  writer.join();
  LocalRedirectStats after = redirect->stats();
  INFO("together: redirected " << after.bytes_redirected - rounds.bytes_redirected << " B, by TCP "
                               << after.bytes_tcp - rounds.bytes_tcp << " B, switches to TCP "
                               << after.flows_to_tcp - rounds.flows_to_tcp);
  CHECK(read == kTotal);
  CHECK(first_bad == UINT64_MAX);
  CHECK(after.sockets_added >= 2);
  redirect->forget(*key, counter);
}

TEST_CASE("a writer whose reader does not read redirects no more than the bound, then waits on TCP", "[redirect]") {
  constexpr uint64_t kBound = 256 * 1024;
  Redirected r(kBound);
  auto& redirect = r.redirect;
  for (size_t send_size : {size_t{64}, size_t{64 * 1024}}) {
    INFO("sends of " << send_size << " bytes");
    Connection c = connect_pair(r.port);
    auto key = redirect_key_of(c.server.get());
    REQUIRE(key);
    std::atomic<uint64_t>* counter = redirect->admit_reader(*key);
    REQUIRE(counter);
    LocalRedirectStats before = redirect->stats();
    ::fcntl(c.client.get(), F_SETFL, O_NONBLOCK);
    std::vector<uint8_t> chunk(send_size, 'x');
    uint64_t sent = 0;
    // Until TCP's window stops the writer (bounded in count, whatever happens).
    for (int i = 0; i < 1 << 20; ++i) {
      ssize_t n = ::send(c.client.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<uint64_t>(n);
    }
    LocalRedirectStats after = redirect->stats();
    uint64_t redirected = after.bytes_redirected - before.bytes_redirected;
    INFO("sent " << sent << ", redirected " << redirected);
    CHECK(sent < 64ull << 20);  // the writer was stopped
    CHECK(redirected > 0);
    CHECK(redirected <= 2 * kBound);  // the bound holds within 2x
    redirect->forget(*key, counter);
  }
}

TEST_CASE("a flow rdmagw sends is redirected, and the reader's unread bytes show as its receive memory", "[redirect]") {
  Redirected r(256 * 1024);
  auto& redirect = r.redirect;
  Connection c = connect_pair(r.port);
  auto key = redirect_key_of(c.server.get());
  REQUIRE(key);
  REQUIRE(redirect->admit_sender(*key));
  SocketMemory memory;
  std::string why;
  REQUIRE(memory.open(&why));
  LocalRedirectStats before = redirect->stats();
  std::vector<uint8_t> chunk(1 << 20, 'y');
  REQUIRE(::send(c.server.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(chunk.size()));
  LocalRedirectStats after = redirect->stats();
  CHECK(after.bytes_redirected - before.bytes_redirected == chunk.size());
  // The application has not read: its socket holds the megabyte (the peer
  // of rdmagw's end is the application's end).
  auto unread = memory.receive_bytes(key->remote, key->local);
  REQUIRE(unread);
  CHECK(*unread >= chunk.size());
  std::vector<uint8_t> buffer(chunk.size());
  size_t got = 0;
  while (got < buffer.size()) {
    ssize_t n = ::recv(c.client.get(), buffer.data() + got, buffer.size() - got, 0);
    REQUIRE(n > 0);
    got += static_cast<size_t>(n);
  }
  CHECK(std::equal(buffer.begin(), buffer.end(), chunk.begin(), chunk.end()));
  unread = memory.receive_bytes(key->remote, key->local);
  REQUIRE(unread);
  CHECK(*unread < chunk.size());
  redirect->forget(*key, nullptr);
}

TEST_CASE("connections of two applications that rdmagw did not admit stay on TCP", "[redirect]") {
  Redirected r(256 * 1024);
  auto& redirect = r.redirect;
  Connection c = connect_pair(r.port);
  LocalRedirectStats before = redirect->stats();
  std::string text = "not rdmagw's";
  REQUIRE(::send(c.client.get(), text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
  char buffer[64];
  REQUIRE(::recv(c.server.get(), buffer, sizeof(buffer), 0) == static_cast<ssize_t>(text.size()));
  LocalRedirectStats after = redirect->stats();
  CHECK(after.bytes_redirected == before.bytes_redirected);
  CHECK(after.bytes_tcp - before.bytes_tcp == text.size());
}

namespace {

// rdmagw's end of a connection sends the stream through a RedirectedLeg
// (paced: at most what before_send() allows, non-blocking) while the
// application's end reads in bursts separated by pauses. Returns the first
// offset out of place (UINT64_MAX: none) and counts the leg's switches
// between redirection and TCP in *switches.
uint64_t paced_stream(LegRedirector& redirector, const Connection& c, uint64_t total, std::mt19937& random,
                      uint64_t* switches) {
  auto leg = RedirectedLeg::admit(redirector, c.server.get());
  REQUIRE(leg);
  ::fcntl(c.server.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(c.client.get(), F_SETFL, O_NONBLOCK);
  std::vector<uint8_t> chunk, buffer(1 << 20);
  uint64_t sent = 0, read = 0, first_bad = UINT64_MAX;
  bool by_tcp = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < 100000000 && read < total && first_bad == UINT64_MAX; ++i) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    // The sender, as LocalStream does: ask, send at most that, note it.
    if (sent < total) {
      size_t limit = leg->before_send(c.server.get());
      size_t k = std::min<uint64_t>({limit, 1 + random() % 70000, total - sent});
      chunk.resize(k);
      for (size_t j = 0; j < k; ++j) chunk[j] = stream_byte(sent + j);
      ssize_t n = ::send(c.server.get(), chunk.data(), k, MSG_NOSIGNAL);
      if (n > 0) {
        leg->sent(static_cast<uint64_t>(n));
        sent += static_cast<uint64_t>(n);
      }
      if (leg->sending_by_tcp() != by_tcp) {
        by_tcp = !by_tcp;
        ++*switches;
      }
    }
    // The application: reads only now and then, so that rdmagw's unread
    // bytes there reach the bound, and sometimes drains everything.
    if (random() % 8 != 0) continue;
    for (int burst = 1 + static_cast<int>(random() % 4); burst > 0; --burst) {
      ssize_t got = ::recv(c.client.get(), buffer.data(), 1 + random() % buffer.size(), 0);
      if (got <= 0) break;
      for (ssize_t k = 0; k < got && first_bad == UINT64_MAX; ++k)
        if (buffer[static_cast<size_t>(k)] != stream_byte(read + static_cast<uint64_t>(k)))
          first_bad = read + static_cast<uint64_t>(k);
      read += static_cast<uint64_t>(got);
    }
    if (by_tcp && random() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(1200));
  }
  CHECK(read == total);
  return first_bad;
}

}  // namespace

TEST_CASE("rdmagw's paced sends to a reader that pauses go by TCP at the bound and come back, in order", "[redirect]") {
  constexpr uint64_t kBound = 64 * 1024;
  Redirected r(kBound);
  LegRedirector redirector{*r.redirect, {}};
  std::string why;
  REQUIRE(redirector.memory.open(&why));
  Connection c = connect_pair(r.port);
  std::mt19937 random(7);
  uint64_t switches = 0;
  uint64_t first_bad = paced_stream(redirector, c, 32ull << 20, random, &switches);
  INFO("switches between redirection and TCP: " << switches);
  CHECK(first_bad == UINT64_MAX);
  CHECK(switches >= 4);  // it went to TCP and came back, more than once
}

TEST_CASE("probe_redirect: rdmagw's own connection is redirected and counted", "[redirect]") {
  Redirected r(256 * 1024);
  std::string why;
  CHECK(probe_redirect(*r.redirect, &why));
  INFO(why);
}

// tests/... perf/local_legs_soak.sh: RDMAGW_SOAK_SECONDS of switching, both
// kinds of flow, every byte checked. Hidden: not part of the default run.
TEST_CASE("soak: switches between redirection and TCP never put a byte out of place", "[.soak]") {
  const char* seconds_text = std::getenv("RDMAGW_SOAK_SECONDS");
  const int seconds = seconds_text ? std::max(1, std::atoi(seconds_text)) : 10;
  constexpr uint64_t kBound = 4096;
  Redirected r(kBound);
  LegRedirector redirector{*r.redirect, {}};
  std::string why;
  REQUIRE(redirector.memory.open(&why));
  std::mt19937 random(11);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  uint64_t reader_switches = 0, leg_switches = 0, bytes = 0, first_bad = UINT64_MAX;
  auto progress = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < end && first_bad == UINT64_MAX) {
    // A flow rdmagw reads: bursts past the bound while rdmagw waits, then
    // rdmagw reads all; each round is a switch to TCP and back.
    Connection c = connect_pair(r.port);
    auto key = redirect_key_of(c.server.get());
    REQUIRE(key);
    std::atomic<uint64_t>* counter = r.redirect->admit_reader(*key);
    REQUIRE(counter);
    uint64_t offset = 0, before = r.redirect->stats().flows_to_tcp;
    for (int round = 0; round < 2000 && first_bad == UINT64_MAX; ++round) {
      uint64_t burst = kBound * (2 + random() % 3) + random() % kBound;
      send_stream(c.client.get(), offset, burst, random, kBound);
      first_bad = read_stream(c.server.get(), offset, burst, *counter, random);
      offset += burst;
    }
    reader_switches += r.redirect->stats().flows_to_tcp - before;
    bytes += offset;
    r.redirect->forget(*key, counter);
    // A flow rdmagw sends, paced.
    Connection d = connect_pair(r.port);
    uint64_t paced_bad = paced_stream(redirector, d, 4ull << 20, random, &leg_switches);
    if (paced_bad != UINT64_MAX) first_bad = paced_bad;
    bytes += 4ull << 20;
    if (std::chrono::steady_clock::now() - progress > std::chrono::seconds(10)) {
      progress = std::chrono::steady_clock::now();
      std::printf("soak: %llu switches of read flows, %llu of paced flows, %llu MiB, no byte out of place\n",
                  static_cast<unsigned long long>(reader_switches), static_cast<unsigned long long>(leg_switches),
                  static_cast<unsigned long long>(bytes >> 20));
      std::fflush(stdout);
    }
  }
  std::printf("soak done: %d s, %llu switches of read flows, %llu of paced flows, %llu MiB%s\n", seconds,
              static_cast<unsigned long long>(reader_switches), static_cast<unsigned long long>(leg_switches),
              static_cast<unsigned long long>(bytes >> 20), first_bad == UINT64_MAX ? ", no byte out of place" : "");
  CHECK(first_bad == UINT64_MAX);
  CHECK(reader_switches > 0);
  CHECK(leg_switches > 0);
}
