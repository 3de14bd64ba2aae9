// SPDX-License-Identifier: Apache-2.0
//
// forkecho: perf/peers' forking server, written as such servers were and are
// (inetd-style, pre-fork daemons): plain socket(AF_INET, SOCK_STREAM, 0),
// blocking calls, and a child forked for each connection. Its client
// measures 64-byte round trips, then echoed bulk compared byte for byte, and
// prints one JSON line, as goecho's does.
//
//   forkecho server PORT [--smc]
//   forkecho client HOST PORT SECONDS [--smc]
//
// --smc opens AF_SMC sockets instead (the kernel's SMC, on SMC-R when it
// finds an RDMA device for the route, else on TCP: it falls back silently).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kAfSmc = 43;  // AF_SMC, linux/socket.h
// The bulk pattern's length: a prime, so bytes lost, repeated or out of
// order show at any granularity a transport could get wrong.
constexpr size_t kPeriod = 65537;
constexpr size_t kChunk = 64 * 1024;

using Clock = std::chrono::steady_clock;

int open_socket(bool smc) {
  int fd = socket(smc ? kAfSmc : AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    std::fprintf(stderr, "forkecho: socket(%s): %s\n", smc ? "AF_SMC" : "AF_INET", std::strerror(errno));
    std::exit(1);
  }
  return fd;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

int serve(int port, bool smc) {
  signal(SIGCHLD, SIG_IGN);  // the kernel reaps the children
  int ln = open_socket(smc);
  int one = 1;
  setsockopt(ln, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(ln, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(ln, 64) != 0) {
    std::fprintf(stderr, "forkecho: bind/listen on port %d: %s\n", port, std::strerror(errno));
    return 1;
  }
  std::printf("listening %d\n", port);
  std::fflush(stdout);
  for (;;) {
    int c = accept(ln, nullptr, nullptr);
    if (c < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "forkecho: accept: %s\n", std::strerror(errno));
      return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(ln);
      std::vector<char> buf(256 * 1024);
      for (;;) {
        ssize_t n = read(c, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || !write_all(c, buf.data(), static_cast<size_t>(n))) break;
      }
      _exit(0);
    }
    close(c);
  }
}

int dial(const char* host, int port, bool smc) {
  int fd = open_socket(smc);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
    std::fprintf(stderr, "forkecho: %s is not an IPv4 address\n", host);
    std::exit(2);
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -errno;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// 64-byte messages one at a time; the round trips in microseconds.
std::string ping_pong(const char* host, int port, double seconds, bool smc, std::vector<double>& rtts) {
  int fd = dial(host, port, smc);
  if (fd < 0) return std::string("connect: ") + std::strerror(-fd);
  char msg[64], reply[64];
  std::memset(msg, 'p', sizeof msg);
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::string error;
  while (Clock::now() < end && rtts.size() < 1000000) {
    auto t0 = Clock::now();
    if (!write_all(fd, msg, sizeof msg)) {
      error = std::string("ping-pong write: ") + std::strerror(errno);
      break;
    }
    size_t got = 0;
    while (got < sizeof reply) {
      ssize_t n = read(fd, reply + got, sizeof reply - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = n == 0 ? "ping-pong: the echo ended early" : std::string("ping-pong read: ") + std::strerror(errno);
        break;
      }
      got += static_cast<size_t>(n);
    }
    if (!error.empty()) break;
    rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  close(fd);
  return error;
}

struct Bulk {
  size_t bytes = 0;
  double seconds = 0;
  bool same = true;
  std::string error;
};

// Sends the pattern for `seconds` while reading the echo (poll, one thread),
// then half-closes and reads the rest.
Bulk bulk(const char* host, int port, double seconds, bool smc) {
  Bulk r;
  int fd = dial(host, port, smc);
  if (fd < 0) {
    r.error = std::string("connect: ") + std::strerror(-fd);
    return r;
  }
  std::vector<char> pattern(2 * kPeriod);
  std::mt19937 rng(1);
  for (size_t i = 0; i < kPeriod; ++i) pattern[i] = static_cast<char>(rng());
  std::copy(pattern.begin(), pattern.begin() + kPeriod, pattern.begin() + kPeriod);
  std::vector<char> buf(256 * 1024);
  size_t sent = 0;
  bool writing = true;
  auto t0 = Clock::now();
  auto send_until = t0 + std::chrono::duration<double>(seconds);
  auto give_up = send_until + std::chrono::seconds(60);
  while (Clock::now() < give_up) {
    if (writing && Clock::now() >= send_until) {
      shutdown(fd, SHUT_WR);
      writing = false;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (writing ? POLLOUT : 0)), 0};
    if (poll(&p, 1, 1000) < 0 && errno != EINTR) {
      r.error = std::string("poll: ") + std::strerror(errno);
      break;
    }
    if (writing && (p.revents & POLLOUT)) {
      ssize_t n = send(fd, pattern.data() + sent % kPeriod, kChunk, MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        r.error = std::string("send: ") + std::strerror(errno);
        break;
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        r.error = std::string("recv: ") + std::strerror(errno);
        break;
      }
      for (size_t off = 0; off < static_cast<size_t>(n);) {
        size_t m = std::min(static_cast<size_t>(n) - off, kPeriod);
        size_t at = (r.bytes + off) % kPeriod;
        r.same = r.same && std::memcmp(buf.data() + off, pattern.data() + at, m) == 0;
        off += m;
      }
      r.bytes += static_cast<size_t>(n);
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.same = r.same && r.bytes == sent;
  close(fd);
  return r;
}

int client(const char* host, int port, double seconds, bool smc) {
  std::vector<double> rtts;
  std::string error = ping_pong(host, port, seconds, smc, rtts);
  std::string out = "{";
  if (!rtts.empty()) {
    std::sort(rtts.begin(), rtts.end());
    char s[160];
    std::snprintf(s, sizeof s, "\"round_trips\": %zu, \"p50_us\": %.1f, \"p99_us\": %.1f", rtts.size(),
                  rtts[rtts.size() / 2], rtts[rtts.size() * 99 / 100]);
    out += s;
  }
  if (error.empty()) {
    Bulk b = bulk(host, port, seconds, smc);
    char s[200];
    std::snprintf(s, sizeof s, "%s\"bulk_bytes\": %zu, \"mib_s\": %.3f, \"bytes_ok\": %s", rtts.empty() ? "" : ", ",
                  b.bytes, b.seconds > 0 ? b.bytes / 1048576.0 / b.seconds : 0.0, b.same ? "true" : "false");
    out += s;
    error = b.error;
  }
  if (!error.empty()) {
    for (char& ch : error)
      if (ch == '"' || ch == '\\') ch = '\'';
    out += (out.size() > 1 ? ", " : "") + std::string("\"error\": \"") + error + "\"";
  }
  out += "}";
  std::printf("%s\n", out.c_str());
  return error.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  bool smc = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smc") == 0)
      smc = true;
    else
      args.emplace_back(argv[i]);
  }
  if (args.size() == 2 && args[0] == "server") return serve(std::atoi(args[1].c_str()), smc);
  if (args.size() == 4 && args[0] == "client")
    return client(args[1].c_str(), std::atoi(args[2].c_str()), std::atof(args[3].c_str()), smc);
  std::fprintf(stderr, "usage: forkecho server PORT [--smc] | forkecho client HOST PORT SECONDS [--smc]\n");
  return 2;
}
