// SPDX-License-Identifier: Apache-2.0
#pragma once
// A dialer and an acceptor tunnel::Session joined by fake transports
// (fake_transport.h) that a test carries bytes between, cuts (dropping what
// was in flight) and replaces: for resumption and authentication tests.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "fake_stream.h"
#include "fake_transport.h"
#include "proxy/tunnel/session.h"
#include "tunnel_keys.h"

namespace rdmagw::test {

using tunnel::FrameHeader;
using tunnel::FrameReader;
using tunnel::Session;
using tunnel::SessionSettings;
using tunnel::Transport;

inline constexpr uint32_t kKiB = 1024;
inline constexpr const char* kTarget = "tcp:10.0.0.5:6379";

inline SessionSettings resumable_settings(std::string node, uint32_t resume_timeout_ms = 10000) {
  SessionSettings s;
  s.node = std::move(node);
  tunnel_keys(s).buffer_size = 4 * kKiB;
  tunnel_keys(s).stream_window = 64 * kKiB;
  tunnel_keys(s).session_budget = 256 * kKiB;
  tunnel_keys(s).resume_timeout_ms = resume_timeout_ms;
  return s;
}

// A dialer and an acceptor, each on its own fake transport, on one loop.
struct Pair {
  BufferPool pool;
  EventLoop loop;
  FakeOwner dial_owner, accept_owner;
  SessionSettings dial_settings, accept_settings;
  FakeTransport* dial_wire = nullptr;
  FakeTransport* accept_wire = nullptr;
  IoPtr<Session> dialer, acceptor;
  std::vector<IoPtr<Session>> shells;  // acceptor sessions that parsed a resume request

  explicit Pair(SessionSettings d = resumable_settings("dialer"), SessionSettings a = resumable_settings("acceptor"))
      : pool(kBufferHeadroom + 4 * kKiB, 4096), dial_settings(std::move(d)), accept_settings(std::move(a)) {
    log::set_level(log::Level::kError);
    std::string error;
    if (!loop.init(64, &error)) FAIL("io_uring: " << error);
    dialer = make_io<Session>(loop, pool, Session::Role::kDialer, dial_settings, new_wire(&dial_wire), &dial_owner);
    acceptor =
        make_io<Session>(loop, pool, Session::Role::kAcceptor, accept_settings, new_wire(&accept_wire), &accept_owner);
    acceptor->start();
    dialer->start();
    pump();
  }
  ~Pair() {
    dialer.reset();
    acceptor.reset();
    shells.clear();
    loop.shut_down();
  }

  IoPtr<Transport> new_wire(FakeTransport** out, tunnel::TransportKind kind = tunnel::TransportKind::kTcp) {
    auto t = make_io<FakeTransport>(loop, pool, 4 * kKiB, kind);
    *out = t.get();
    return IoPtr<Transport>(t.release());
  }

  // Carries bytes both ways until neither side has anything to send.
  void pump() {
    for (int i = 0; i < 1000; ++i) {
      loop.end_batch();
      Bytes to_acceptor = dial_wire->drain_wire();
      Bytes to_dialer = accept_wire->drain_wire();
      if (to_acceptor.empty() && to_dialer.empty()) return;
      if (!to_acceptor.empty() && accept_wire->delivering()) accept_wire->inject(to_acceptor);
      if (!to_dialer.empty() && dial_wire->delivering()) dial_wire->inject(to_dialer);
    }
    FAIL("the sessions never went quiet");
  }

  // Delivers the first `frames` whole frames each way of what is queued and
  // drops the rest (it was on the wire when the transport broke).
  void deliver_part(size_t frames) {
    loop.end_batch();
    auto part = [&](FakeTransport* from, FakeTransport* to) {
      Bytes wire = from->drain_wire();
      FrameReader reader(1024 * 1024);
      size_t off = 0;
      for (size_t n = 0; n < frames && off < wire.size(); ++n) {
        FrameHeader h;
        std::span<const uint8_t> payload;
        size_t used = 0;
        std::string reason;
        REQUIRE(reader.next(wire.data() + off, wire.size() - off, &h, &payload, &used, &reason) ==
                FrameReader::Status::kFrame);
        off += used;
      }
      to->inject(Bytes(wire.begin(), wire.begin() + static_cast<long>(off)));
    };
    part(dial_wire, accept_wire);
    part(accept_wire, dial_wire);
  }

  // Both sides see their transport fail.
  void cut() {
    dial_wire->fail("cut by the test");
    accept_wire->fail("cut by the test");
    loop.end_batch();
  }

  // The dialer dials again; the acceptor's side parses the request in a new
  // session, which hands the transport to the session it resumes.
  void reconnect(tunnel::TransportKind kind = tunnel::TransportKind::kTcp) {
    REQUIRE(dialer->wants_transport());
    dialer->resume(new_wire(&dial_wire, kind));
    shells.push_back(make_io<Session>(loop, pool, Session::Role::kAcceptor, accept_settings,
                                      new_wire(&accept_wire, kind), &accept_owner));
    shells.back()->start();
    pump();
  }

  // Opens a stream from the dialer (`a`) whose acceptor end is `b`; both
  // write what arrives to their sockets at once, so credit flows back.
  void open_stream_pair(FakeStream& a, FakeStream& b) {
    a.deliver_now = b.deliver_now = 1 << 30;
    REQUIRE(dialer->open_stream(a, kTarget, nullptr, 0));
    accept_owner.give(b);
    pump();
  }

  uint8_t* buffer_with(std::string_view payload) {
    uint8_t* b = pool.acquire();
    REQUIRE(b);
    std::memcpy(b + kBufferHeadroom, payload.data(), payload.size());
    return b;
  }
  // Sends what credit allows of `data` from `offset` on; returns the new offset.
  size_t send(Session& s, FakeStream& stream, const std::string& data, size_t offset) {
    while (offset < data.size()) {
      uint32_t want = static_cast<uint32_t>(std::min<size_t>(data.size() - offset, 4 * kKiB));
      uint32_t n = s.take_stream_credit(stream, want);
      if (n == 0) break;
      if (!s.take_session_credit(stream, n)) {
        s.refund_stream_credit(stream, n);
        break;
      }
      s.send_data(stream, buffer_with(std::string_view(data).substr(offset, n)), n);
      offset += n;
    }
    return offset;
  }
};

}  // namespace rdmagw::test
