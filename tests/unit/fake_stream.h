// SPDX-License-Identifier: Apache-2.0
#pragma once
// What sits above a tunnel::Session in unit tests that drive it frame by
// frame over a FakeTransport (fake_transport.h):
//
// - FakeOwner: a SessionOwner that records what it is told and hands out
//   the streams the test queued for the peer's OPENs (or refuses them).
// - FakeStream: a tunnel::Stream that records its hooks and can refuse
//   payload or report it delivered at once; its other hooks may run test
//   code (which may call the session: they run after the batch).
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/tunnel/session.h"
#include "proxy/tunnel/stream.h"

namespace rdmagw::test {

// --- the owner -----------------------------------------------------------------

class FakeOwner final : public tunnel::SessionOwner {
 public:
  struct Closed {
    tunnel::SessionEnd end;
    std::string reason;
  };
  struct OpenRequest {
    uint32_t id;
    std::string target;
    std::optional<tunnel::StreamOrigin> origin;  // what the OPEN said of it, if anything
  };

  explicit FakeOwner(std::vector<std::string>* log = nullptr) : log_(log) {}

  // The next peer OPEN gets `stream`; OPENs with none queued are refused
  // with refuse_code.
  void give(tunnel::Stream& stream) { to_give_.push_back(&stream); }

  void on_session_open(tunnel::Session&) override {
    ++opened;
    note("owner:open");
  }
  void on_session_closed(tunnel::Session&, tunnel::SessionEnd end, std::string_view reason) override {
    closed.push_back({end, std::string(reason)});
    note("owner:closed");
  }
  void on_session_draining(tunnel::Session&) override {
    ++draining;
    note("owner:draining");
  }
  void on_session_suspended(tunnel::Session&) override {
    ++suspended;
    note("owner:suspended");
  }
  bool on_session_identified(tunnel::Session& session) override {
    ++identified;
    identified_session = &session;
    return true;
  }
  tunnel::Session* find_session(const tunnel::SessionToken& token) override {
    return identified_session && identified_session->token() == token ? identified_session : nullptr;
  }
  tunnel::Stream* on_stream_open(tunnel::Session&, uint32_t id, std::string_view target,
                                 const tunnel::StreamOrigin* origin, tunnel::ResetCode* refuse) override {
    open_requests.push_back({id, std::string(target), origin ? std::optional(*origin) : std::nullopt});
    if (to_give_.empty()) {
      *refuse = refuse_code;
      return nullptr;
    }
    tunnel::Stream* s = to_give_.front();
    to_give_.pop_front();
    return s;
  }

  int opened = 0;
  int draining = 0;
  int suspended = 0;
  int identified = 0;
  // The last session named new (acceptor): find_session() finds it; a test
  // clears it to play a restarted peer.
  tunnel::Session* identified_session = nullptr;
  std::vector<Closed> closed;
  std::vector<OpenRequest> open_requests;
  tunnel::ResetCode refuse_code = tunnel::ResetCode::kRefused;

 private:
  void note(std::string e) {
    if (log_) log_->push_back(std::move(e));
  }
  std::vector<std::string>* log_;
  std::deque<tunnel::Stream*> to_give_;
};

// --- the stream ----------------------------------------------------------------

class FakeStream final : public tunnel::Stream {
 public:
  explicit FakeStream(std::string name = "s", std::vector<std::string>* log = nullptr)
      : name_(std::move(name)), log_(log) {}
  ~FakeStream() override = default;

  // What on_peer_data() does: refuse the bytes, or report up to
  // `deliver_now` of each call as written to the socket at once (the rest
  // is kept; 0 keeps everything).
  bool refuse_data = false;
  uint32_t deliver_now = 0;
  // Test code run from the hooks (they may call the session).
  std::function<void(FakeStream&)> on_data_hook;  // while delivering: must not call the session
  std::function<void(FakeStream&)> on_fin_hook;
  std::function<void(FakeStream&)> on_reset_hook;
  std::function<void(FakeStream&)> on_credit_hook;
  std::function<void(FakeStream&)> on_lost_hook;

  std::string received;  // every byte handed to on_peer_data, accepted or not
  int data_calls = 0;
  int fins = 0;
  int credits = 0;
  std::vector<tunnel::ResetCode> resets;
  std::vector<std::string> lost;
  // Whether the stream still had a session when its last hook ran.
  bool attached_in_last_hook = false;

 protected:
  Delivery on_peer_data(std::span<const iovec> pieces) override {
    ++data_calls;
    size_t total = 0;
    for (const iovec& p : pieces) {
      received.append(static_cast<const char*>(p.iov_base), p.iov_len);
      total += p.iov_len;
    }
    if (on_data_hook) on_data_hook(*this);
    Delivery d;
    if (refuse_data) {
      d.accepted = false;
      return d;
    }
    d.delivered = std::min<uint32_t>(deliver_now, static_cast<uint32_t>(total));
    return d;
  }
  void on_peer_fin() override {
    ++fins;
    hook("fin", on_fin_hook);
  }
  void on_peer_reset(tunnel::ResetCode code) override {
    resets.push_back(code);
    hook("reset:" + std::string(tunnel::reset_code_name(code)), on_reset_hook);
  }
  void on_send_credit() override {
    ++credits;
    hook("credit", on_credit_hook);
  }
  void on_session_lost(std::string_view reason) override {
    lost.emplace_back(reason);
    hook("lost", on_lost_hook);
  }

 private:
  void hook(const std::string& what, const std::function<void(FakeStream&)>& fn) {
    attached_in_last_hook = session() != nullptr;
    if (log_) log_->push_back(name_ + ":" + what);
    if (fn) fn(*this);
  }
  std::string name_;
  std::vector<std::string>* log_;
};

}  // namespace rdmagw::test
