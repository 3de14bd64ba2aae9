// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/redirected_leg.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/address.h"

namespace rdmagw::local {

static_assert(sizeof(RedirectKey) == kRedirectedLegKeySize, "a takeover image carries a leg's key as its bytes");

namespace {

constexpr auto kTcpCheckInterval = std::chrono::milliseconds(1);
constexpr size_t kProbeBytes = 4096;

sockaddr_storage local_address(int fd) {
  sockaddr_storage a{};
  socklen_t length = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
  return a;
}

}  // namespace

bool probe_redirect(LocalRedirect& redirect, std::string* why) {
  LegRedirector redirector{redirect, {}};
  if (!redirector.memory.open(why)) return false;
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!listener.valid() || ::bind(listener.get(), reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
      ::listen(listener.get(), 1) != 0) {
    *why = std::string("cannot open a loopback socket to check the redirect: ") + strerror(errno);
    return false;
  }
  sockaddr_storage bound = local_address(listener.get());
  uint16_t port = ntohs(reinterpret_cast<sockaddr_in&>(bound).sin_port);
  if (!redirect.add_port(port, why)) return false;
  struct PortGuard {
    LocalRedirect& redirect;
    uint16_t port;
    ~PortGuard() { redirect.remove_port(port); }
  } guard{redirect, port};
  UniqueFd app(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!app.valid() || ::connect(app.get(), reinterpret_cast<sockaddr*>(&bound), sizeof(sockaddr_in)) != 0) {
    *why = std::string("cannot connect a loopback socket to check the redirect: ") + strerror(errno);
    return false;
  }
  UniqueFd own(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!own.valid()) {
    *why = std::string("cannot accept a loopback connection to check the redirect: ") + strerror(errno);
    return false;
  }
  uint64_t before = redirect.stats().bytes_redirected;
  {
    std::unique_ptr<RedirectedLeg> leg = RedirectedLeg::admit(redirector, own.get());
    if (!leg) {
      *why = "the redirect maps refused rdmagw's own connection";
      return false;
    }
    char bytes[kProbeBytes] = {};
    if (::send(own.get(), bytes, sizeof(bytes), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(bytes))) {
      *why = std::string("cannot send on a loopback connection to check the redirect: ") + strerror(errno);
      return false;
    }
  }
  if (redirect.stats().bytes_redirected - before < kProbeBytes) {
    *why = "rdmagw's own loopback connection was not redirected: is rdmagw in local_legs.cgroup (or below it)?";
    return false;
  }
  std::optional<uint64_t> unread = redirector.memory.receive_bytes(local_address(app.get()), local_address(own.get()));
  if (!unread || *unread < kProbeBytes) {
    *why =
        "this kernel does not count redirected bytes as the reader's receive memory (6.13 or later does, and "
        "6.12.8), so rdmagw could not bound what it sends an application";
    return false;
  }
  return true;
}

std::unique_ptr<RedirectedLeg> RedirectedLeg::admit(LegRedirector& redirector, int fd) {
  std::optional<RedirectKey> key = redirect_key_of(fd);
  if (!key || !is_loopback_address(key->local) || !is_loopback_address(key->remote)) return nullptr;
  std::unique_ptr<RedirectedLeg> leg(new RedirectedLeg(redirector, *key));
  leg->counter_ = redirector.redirect.admit_reader(*key);
  leg->sender_ = redirector.redirect.admit_sender(*key);
  if (!leg->counter_ && !leg->sender_) return nullptr;
  return leg;
}

RedirectedLeg::~RedirectedLeg() { redirector_.redirect.forget(key_, counter_); }

RedirectedLegImage RedirectedLeg::image() const {
  RedirectedLegImage image;
  image.present = true;
  auto* bytes = reinterpret_cast<const uint8_t*>(&key_);
  image.key.assign(bytes, bytes + sizeof(key_));
  image.slot = counter_ ? static_cast<int32_t>(redirector_.redirect.slot_of(counter_)) : -1;
  image.sender = sender_;
  image.by_tcp = by_tcp_;
  return image;
}

bool claim_leg_slot(LocalRedirect& redirect, const RedirectedLegImage& image) {
  if (!image.present || image.slot < 0) return true;
  return redirect.claim_slot(static_cast<uint32_t>(image.slot)) != nullptr;
}

std::unique_ptr<RedirectedLeg> RedirectedLeg::restore(LegRedirector& redirector, const RedirectedLegImage& image) {
  RedirectKey key;
  if (!image.present || image.key.size() != sizeof(key)) return nullptr;  // sizes checked by the image's decoder
  std::memcpy(&key, image.key.data(), sizeof(key));
  std::unique_ptr<RedirectedLeg> leg(new RedirectedLeg(redirector, key));
  // The slot is claimed (claim_leg_slot): this is its counter, which holds
  // what the old process read.
  if (image.slot >= 0) {
    leg->counter_ = redirector.redirect.counter(static_cast<uint32_t>(image.slot));
    leg->read_ = leg->counter_->load(std::memory_order_acquire);
  }
  leg->sender_ = image.sender;
  leg->by_tcp_ = image.by_tcp;
  // budget_ 0: the first send asks what the application holds unread.
  leg->last_check_ = std::chrono::steady_clock::now();
  return leg;
}

size_t RedirectedLeg::before_send(int fd) {
  uint64_t bound = redirector_.redirect.max_in_flight();
  if (!sender_) return SIZE_MAX;
  if (by_tcp_) {
    auto now = std::chrono::steady_clock::now();
    if (now - last_check_ < kTcpCheckInterval) return SIZE_MAX;
    last_check_ = now;
    // Everything sent by TCP must have been read before a redirected byte
    // may follow: nothing unacknowledged here (on loopback, acknowledged
    // is queued there), nothing unread there.
    int unacknowledged = 0;
    if (::ioctl(fd, SIOCOUTQ, &unacknowledged) != 0 || unacknowledged != 0) return SIZE_MAX;
    std::optional<uint64_t> unread = redirector_.memory.receive_bytes(key_.remote, key_.local);
    if (!unread || *unread != 0) return SIZE_MAX;
    if (!redirector_.redirect.send_by_tcp(key_, false)) return SIZE_MAX;
    by_tcp_ = false;
    budget_ = bound;
    return static_cast<size_t>(budget_);
  }
  if (budget_ < bound / 8 + 1) {
    // What the application holds unread now, asked only when what may be
    // sent without asking runs low: a reader that keeps up costs one
    // question per max_in_flight sent.
    std::optional<uint64_t> unread = redirector_.memory.receive_bytes(key_.remote, key_.local);
    // No answer: the application's socket is gone, and the programs send
    // by TCP whatever cannot be redirected.
    uint64_t held = unread.value_or(0);
    if (held + bound / 8 >= bound) {
      if (redirector_.redirect.send_by_tcp(key_, true)) {
        by_tcp_ = true;
        last_check_ = std::chrono::steady_clock::now();
        return SIZE_MAX;
      }
      held = bound - 1;  // the map refused: send a byte at a time until the reader catches up
    }
    budget_ = bound - held;
  }
  return static_cast<size_t>(budget_);
}

}  // namespace rdmagw::local
