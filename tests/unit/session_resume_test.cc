// SPDX-License-Identifier: Apache-2.0
// Resumable sessions (docs/protocol.md, "Resumption"): a dialer and an
// acceptor tunnel::Session joined by fake transports that the test carries
// bytes between, cuts (dropping what was in flight) and replaces.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "fake_stream.h"
#include "fake_transport.h"
#include "proxy/tunnel/session.h"
#include "session_pair.h"
#include "tunnel_keys.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;
using namespace rdmagw::test;
using namespace std::chrono_literals;

namespace {

std::string pattern(size_t size, char seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>(seed + (i * 7 + i / 251) % 61);
  return s;
}

}  // namespace

TEST_CASE("resumable sessions: both sides offer resumption and agree on a token") {
  Pair p;
  REQUIRE(p.dialer->open());
  REQUIRE(p.acceptor->open());
  CHECK(p.dialer->resumable());
  CHECK(p.acceptor->resumable());
  CHECK(p.dialer->token() == p.acceptor->token());
  CHECK(p.accept_owner.identified == 1);
  CHECK(p.dial_owner.opened == 1);
  CHECK(p.accept_owner.opened == 1);
}

TEST_CASE("resumable sessions: streams cross many transport failures byte-exact, both ways") {
  Pair p;
  FakeStream a("a"), b("b");
  a.deliver_now = b.deliver_now = 1 << 30;  // written to their sockets at once: credit flows back
  REQUIRE(p.dialer->open_stream(a, kTarget, nullptr, 0));
  p.accept_owner.give(b);
  p.pump();
  REQUIRE(b.session() == p.acceptor.get());

  std::string up = pattern(3 * 1024 * 1024, 'A');
  std::string down = pattern(2 * 1024 * 1024 + 77, 'a');
  size_t up_sent = 0, down_sent = 0;
  int cuts = 0;
  for (int round = 0; round < 400 && (up_sent < up.size() || down_sent < down.size()); ++round) {
    up_sent = p.send(*p.dialer, a, up, up_sent);
    down_sent = p.send(*p.acceptor, b, down, down_sent);
    if (round % 5 == 4) {
      // Part of what was in flight arrives, the rest is lost with the transport.
      p.deliver_part(static_cast<size_t>(round % 7));
      p.cut();
      ++cuts;
      CHECK(p.dialer->state() == Session::State::kResuming);
      CHECK(p.acceptor->state() == Session::State::kResuming);
      p.reconnect();
      REQUIRE(p.dialer->open());
      REQUIRE(p.acceptor->open());
    } else {
      p.pump();
    }
  }
  p.pump();
  REQUIRE(up_sent == up.size());
  REQUIRE(down_sent == down.size());
  CHECK(b.received.size() == up.size());
  CHECK(a.received.size() == down.size());
  CHECK(b.received == up);
  CHECK(a.received == down);
  CHECK(a.resets.empty());
  CHECK(b.resets.empty());
  CHECK(a.lost.empty());
  CHECK(b.lost.empty());
  CHECK(cuts >= 5);
  CHECK(p.dialer->counters().resumes == static_cast<uint64_t>(cuts));
  CHECK(p.acceptor->counters().resumes == static_cast<uint64_t>(cuts));
  CHECK(p.dialer->counters().resent_bytes > 0);
  CHECK(p.dial_owner.suspended == cuts);
  CHECK(p.dial_owner.closed.empty());
  CHECK(p.accept_owner.closed.size() == static_cast<size_t>(cuts));  // the shells, each handed over
}

TEST_CASE("resumable sessions: the dialer moves a session to a new transport mid-transfer, byte-exact both ways") {
  // As when a session on TCP moves back onto RDMA: the acceptor's transport
  // is still up when the resume request arrives on the new one.
  Pair p;
  FakeStream a("a"), b("b");
  p.open_stream_pair(a, b);
  std::string up = pattern(2 * 1024 * 1024, 'M');
  std::string down = pattern(1024 * 1024 + 13, 'm');
  size_t up_sent = 0, down_sent = 0;
  int moves = 0;
  for (int round = 0; round < 400 && (up_sent < up.size() || down_sent < down.size()); ++round) {
    up_sent = p.send(*p.dialer, a, up, up_sent);
    down_sent = p.send(*p.acceptor, b, down, down_sent);
    if (round % 4 == 3) {
      // Part of what is in flight arrives; the rest goes with the old transport.
      p.deliver_part(static_cast<size_t>(round % 5));
      REQUIRE(p.acceptor->open());
      p.dialer->move_to(p.new_wire(&p.dial_wire), "moved by the test");
      p.shells.push_back(make_io<Session>(p.loop, p.pool, Session::Role::kAcceptor, p.accept_settings,
                                          p.new_wire(&p.accept_wire), &p.accept_owner));
      p.shells.back()->start();
      p.pump();  // the acceptor let go of its old transport (deleted by now)
      REQUIRE(p.dialer->open());
      REQUIRE(p.acceptor->open());
      ++moves;
    } else {
      p.pump();
    }
  }
  p.pump();
  REQUIRE(up_sent == up.size());
  REQUIRE(down_sent == down.size());
  CHECK(b.received == up);
  CHECK(a.received == down);
  CHECK(a.resets.empty());
  CHECK(b.resets.empty());
  CHECK(moves >= 5);
  CHECK(p.dialer->counters().resumes == static_cast<uint64_t>(moves));
  CHECK(p.acceptor->counters().resumes == static_cast<uint64_t>(moves));
  CHECK(p.dial_owner.closed.empty());
}

TEST_CASE("resumable sessions: FIN and RESET lost with a transport still arrive after the resume") {
  Pair p;
  FakeStream a1("a1"), a2("a2"), b1("b1"), b2("b2");
  REQUIRE(p.dialer->open_stream(a1, kTarget, nullptr, 0));
  REQUIRE(p.dialer->open_stream(a2, kTarget, nullptr, 0));
  p.accept_owner.give(b1);
  p.accept_owner.give(b2);
  p.pump();
  p.dialer->send_fin(a1);
  p.dialer->reset_stream(a2, ResetCode::kCancel);
  p.deliver_part(0);  // both frames lost
  p.cut();
  p.reconnect();
  CHECK(b1.fins == 1);
  REQUIRE(b2.resets.size() == 1);
  CHECK(b2.resets[0] == ResetCode::kCancel);
  CHECK(b1.lost.empty());
}

TEST_CASE("resumable sessions: session credit returned while suspended reaches the peer after the resume") {
  // The acceptor's applications read while the session waits for a new
  // transport: the session WINDOW that returns that credit must go out with
  // the resume, not wait for a later delivery that a sender short of credit
  // can never cause.
  Pair p;
  std::vector<std::unique_ptr<FakeStream>> a, b;
  for (int i = 0; i < 4; ++i) {
    a.push_back(std::make_unique<FakeStream>("a"));
    b.push_back(std::make_unique<FakeStream>("b"));
    REQUIRE(p.dialer->open_stream(*a.back(), kTarget, nullptr, 0));
    p.accept_owner.give(*b.back());
  }
  p.pump();
  std::string data = pattern(64 * kKiB, 'q');
  for (auto& s : a) CHECK(p.send(*p.dialer, *s, data, 0) == data.size());  // 4 x 64 KiB: the session window
  p.pump();
  REQUIRE(p.dialer->open_credit() == 0);
  p.cut();
  for (auto& s : b) p.acceptor->delivered(*s, 64 * kKiB);
  p.loop.end_batch();
  p.reconnect();
  REQUIRE(p.dialer->open());
  CHECK(p.dialer->open_credit() > 0);
}

TEST_CASE("resumable sessions: a stream opened while suspended goes out with the resume") {
  Pair p;
  p.cut();
  REQUIRE(p.dialer->state() == Session::State::kResuming);
  FakeStream a("a"), b("b");
  b.deliver_now = 1 << 30;
  CHECK(p.dialer->can_open_streams());
  REQUIRE(p.dialer->open_credit() > 0);
  REQUIRE(p.dialer->open_stream(a, kTarget, p.buffer_with("early"), 5));
  p.accept_owner.give(b);
  p.reconnect();
  REQUIRE(p.acceptor->open());
  CHECK(b.session() == p.acceptor.get());
  CHECK(b.received == "early");
  CHECK(b.resets.empty());
}

TEST_CASE("resumable sessions: acknowledged frames are released, so kept bytes stay bounded") {
  Pair p;
  FakeStream a("a"), b("b");
  b.deliver_now = 1 << 30;
  REQUIRE(p.dialer->open_stream(a, kTarget, nullptr, 0));
  p.accept_owner.give(b);
  p.pump();
  size_t idle = p.pool.in_use();
  std::string data = pattern(2 * 1024 * 1024, 'x');
  size_t sent = 0;
  for (int i = 0; i < 200 && sent < data.size(); ++i) {
    sent = p.send(*p.dialer, a, data, sent);
    p.pump();
    // Never more kept than the windows allow in flight (256 KiB session window).
    CHECK(p.pool.in_use() <= idle + (256 * kKiB) / (4 * kKiB) + 8);
  }
  REQUIRE(sent == data.size());
  // The last bytes are acknowledged on the keepalive timer at the latest.
  p.acceptor->tick(p.loop.now() + 6s);
  p.pump();
  p.dialer->tick(p.loop.now() + 6s);
  CHECK(p.pool.in_use() <= idle + 2);
}

TEST_CASE("resumable sessions: transports lost and resumes are counted by kind and why") {
  using metrics::TransportLoss;
  constexpr size_t kTcp = 0, kRdma = 1;
  auto lost = [](const metrics::WorkerMetrics& m, size_t kind, TransportLoss why) {
    return m.transport_losses[kind][static_cast<size_t>(why)].value();
  };
  metrics::WorkerMetrics dial_metrics, accept_metrics;
  SessionSettings d = resumable_settings("dialer"), a = resumable_settings("acceptor");
  d.metrics = &dial_metrics;
  a.metrics = &accept_metrics;
  Pair p(d, a);
  REQUIRE(p.dialer->open());

  // TCP lost both ways (each side for its own reason), resumed on RDMA.
  p.dial_wire->fail("peer closed the connection", TransportLoss::kPeerClosed);
  p.accept_wire->fail("recv: Connection timed out", TransportLoss::kIoError);
  p.loop.end_batch();
  p.reconnect(TransportKind::kRdma);
  REQUIRE(p.dialer->open());
  CHECK(lost(dial_metrics, kTcp, TransportLoss::kPeerClosed) == 1);
  CHECK(lost(accept_metrics, kTcp, TransportLoss::kIoError) == 1);
  CHECK(dial_metrics.session_resumes[kTcp][kRdma].value() == 1);
  CHECK(accept_metrics.session_resumes[kTcp][kRdma].value() == 1);

  // Then nothing from the peer for keepalive_timeout_ms: RDMA lost, resumed on TCP.
  p.dialer->tick(p.loop.now() + std::chrono::milliseconds(d.tunnel->keepalive_timeout_ms + 1));
  CHECK(p.dialer->state() == Session::State::kResuming);
  CHECK(lost(dial_metrics, kRdma, TransportLoss::kKeepaliveTimeout) == 1);
  p.accept_wire->fail("work completion error: transport retry counter exceeded", TransportLoss::kRetryExceeded);
  p.loop.end_batch();
  p.reconnect(TransportKind::kTcp);
  REQUIRE(p.dialer->open());
  CHECK(lost(accept_metrics, kRdma, TransportLoss::kRetryExceeded) == 1);
  CHECK(dial_metrics.session_resumes[kRdma][kTcp].value() == 1);
  CHECK(accept_metrics.session_resumes[kRdma][kTcp].value() == 1);

  // Every other count stayed at zero: one loss per side per cut.
  uint64_t dial_losses = 0, accept_losses = 0;
  for (size_t kind = 0; kind < metrics::kTransportKinds; ++kind)
    for (size_t why = 0; why < static_cast<size_t>(TransportLoss::kCount); ++why) {
      dial_losses += dial_metrics.transport_losses[kind][why].value();
      accept_losses += accept_metrics.transport_losses[kind][why].value();
    }
  CHECK(dial_losses == 2);
  CHECK(accept_losses == 2);
}

TEST_CASE("resumable sessions: a peer that does not offer resumption gets today's behaviour") {
  Pair p(resumable_settings("dialer"), resumable_settings("acceptor", 0));
  CHECK_FALSE(p.dialer->resumable());
  CHECK_FALSE(p.acceptor->resumable());
  FakeStream a("a"), b("b");
  REQUIRE(p.dialer->open_stream(a, kTarget, nullptr, 0));
  p.accept_owner.give(b);
  p.pump();
  p.cut();
  CHECK(p.dialer->state() == Session::State::kClosed);
  CHECK(a.lost.size() == 1);
  CHECK(b.lost.size() == 1);
  CHECK(p.dial_owner.suspended == 0);
}

TEST_CASE("resumable sessions: an acceptor that does not know the session refuses, and streams are reset") {
  Pair p;
  FakeStream a("a"), b("b");
  REQUIRE(p.dialer->open_stream(a, kTarget, nullptr, 0));
  p.accept_owner.give(b);
  p.pump();
  p.cut();
  p.accept_owner.identified_session = nullptr;  // as if the acceptor's rdmagw restarted
  p.reconnect();
  CHECK(p.dialer->state() == Session::State::kClosed);
  REQUIRE(p.dial_owner.closed.size() == 1);
  CHECK(p.dial_owner.closed[0].end == SessionEnd::kResumeRefused);
  CHECK(a.lost.size() == 1);
}

TEST_CASE("resumable sessions: a session not resumed within resume_timeout_ms ends and resets its streams") {
  Pair p(resumable_settings("dialer", 2000), resumable_settings("acceptor", 2000));
  FakeStream a("a"), b("b");
  REQUIRE(p.dialer->open_stream(a, kTarget, nullptr, 0));
  p.accept_owner.give(b);
  p.pump();
  p.cut();
  p.dialer->tick(p.loop.now() + 1s);
  p.acceptor->tick(p.loop.now() + 1s);
  CHECK(p.dialer->state() == Session::State::kResuming);
  p.dialer->tick(p.loop.now() + 2100ms);
  p.acceptor->tick(p.loop.now() + 2100ms);
  p.loop.end_batch();
  CHECK(p.dialer->state() == Session::State::kClosed);
  CHECK(p.acceptor->state() == Session::State::kClosed);
  REQUIRE(p.dial_owner.closed.size() == 1);
  CHECK(p.dial_owner.closed[0].end == SessionEnd::kResumeTimeout);
  CHECK(a.lost.size() == 1);
  CHECK(b.lost.size() == 1);
}

TEST_CASE("resumable sessions: a session its peer closed on purpose is not resumed") {
  Pair p;
  p.acceptor->close(SessionEnd::kLocalClose, "drained", CloseMode::kFlush);
  p.pump();  // GOAWAY(closing) reaches the dialer
  p.dial_wire->fail("peer closed the connection");
  p.loop.end_batch();
  CHECK(p.dialer->state() == Session::State::kClosed);
  CHECK(p.dial_owner.suspended == 0);
}

TEST_CASE("resumable sessions: malformed resumption frames end the session") {
  Pair p;
  SECTION("an ACK beyond what was sent") {
    p.dial_wire->inject(u64_bytes(FrameType::kAck, 0, 1ull << 40));
    CHECK(p.dialer->state() == Session::State::kClosed);
  }
  SECTION("a SESSION after the handshake") {
    Bytes frame(kHeaderSize + kSessionPayloadSize);
    encode_session(frame.data(), SessionPayload{p.dialer->token(), SessionKind::kResumed, 0});
    p.dial_wire->inject(frame);
    CHECK(p.dialer->state() == Session::State::kClosed);
  }
}

TEST_CASE("sessions without resumption refuse ACK frames") {
  Pair p(resumable_settings("dialer", 0), resumable_settings("acceptor", 0));
  p.dial_wire->inject(u64_bytes(FrameType::kAck, 0, 0));
  CHECK(p.dialer->state() == Session::State::kClosed);
}

TEST_CASE("takeover: a frozen session rebuilt from its image resumes byte-exact") {
  Pair p;
  FakeStream a("a"), b("b");
  p.open_stream_pair(a, b);
  std::string up = pattern(300 * kKiB, 'U');
  std::string down = pattern(200 * kKiB + 5, 'd');
  size_t up_sent = p.send(*p.dialer, a, up, 0);
  size_t down_sent = p.send(*p.acceptor, b, down, 0);
  p.deliver_part(3);  // the rest of what was in flight is lost with the transport

  // The old process: freeze, write down, let go.
  REQUIRE(p.dialer->freeze());
  CHECK(p.dialer->frozen());
  CHECK_FALSE(p.dialer->wants_transport());  // nobody dials for a frozen session
  p.accept_wire->fail("the old process closed it");
  p.loop.end_batch();
  SessionImage image;
  p.dialer->export_image(&image);
  StreamTunnelImage a_image = Session::stream_image(a);
  CHECK(image.token == p.acceptor->token());
  CHECK(image.frames_base + image.frames.size() >= image.peer_acked);
  p.dialer->detach(a);
  p.dialer->close(SessionEnd::kLocalClose, "taken over", CloseMode::kAbort);

  // Kept frames that do not parse as frames are refused, not sent on.
  REQUIRE(image.frames.size() > kHeaderSize);
  SessionImage cut = image;
  cut.frames.pop_back();
  auto refused = make_io<Session>(p.loop, p.pool, p.dial_settings, cut, &p.dial_owner);
  CHECK_FALSE(refused->restored_frames());
  refused->disown();
  refused->close(SessionEnd::kOutOfBuffers, "test", CloseMode::kAbort);
  refused.reset();

  // The new process: the same session, suspended, with the stream on it.
  FakeStream a2("a2");
  a2.deliver_now = 1 << 30;
  auto restored = make_io<Session>(p.loop, p.pool, p.dial_settings, image, &p.dial_owner);
  REQUIRE(restored->restored_frames());
  restored->restore_stream(a2, a_image);
  restored->restore_blocked(image.blocked);
  CHECK(restored->state() == Session::State::kResuming);
  p.dialer = std::move(restored);
  p.reconnect();
  REQUIRE(p.dialer->open());
  REQUIRE(p.acceptor->open());
  // The kept frames went out again each whole in one buffer, as RDMA needs.
  CHECK(p.dial_wire->split_frames == 0);

  for (int round = 0; round < 400 && (up_sent < up.size() || down_sent < down.size()); ++round) {
    up_sent = p.send(*p.dialer, a2, up, up_sent);
    down_sent = p.send(*p.acceptor, b, down, down_sent);
    p.pump();
  }
  p.pump();
  REQUIRE(up_sent == up.size());
  REQUIRE(down_sent == down.size());
  CHECK(b.received == up);
  CHECK(a.received + a2.received == down);
  CHECK(a2.resets.empty());
  CHECK(b.resets.empty());
  CHECK(b.lost.empty());
  CHECK(p.acceptor->counters().resumes == 1);
}

TEST_CASE("takeover: the new process announces what the session announced, whatever its config says") {
  // An upgrade may change a default (tunnel.buffer_size went from 16 to 32
  // KiB): the peer holds the session to the values of its first HELLO and
  // refuses a resume with others.
  enum class Image { kVersion2, kVersion1Right, kVersion1Wrong };
  for (Image kind : {Image::kVersion2, Image::kVersion1Right, Image::kVersion1Wrong}) {
    CAPTURE(static_cast<int>(kind));
    Pair p;
    REQUIRE(p.dialer->freeze());
    p.accept_wire->fail("the old process closed it");
    p.loop.end_batch();
    SessionImage image;
    p.dialer->export_image(&image);
    CHECK(image.own_max_data == p.dial_settings.tunnel->buffer_size);
    CHECK(image.own_stream_window == p.dial_settings.tunnel->stream_window);
    CHECK(image.own_session_window == p.dial_settings.tunnel->session_budget);
    p.dialer->close(SessionEnd::kLocalClose, "taken over", CloseMode::kAbort);

    SessionSettings next = p.dial_settings;  // the new process's config
    tunnel_keys(next).buffer_size = 2 * p.dial_settings.tunnel->buffer_size;
    if (kind == Image::kVersion2) {
      tunnel_keys(next).stream_window *= 2;
      tunnel_keys(next).session_budget *= 2;
    } else {
      // A version 1 image does not say: it is taken to be tunnel.buffer_size
      // where the file sets it, right when that is what the old process used.
      image.own_max_data = image.own_stream_window = 0;
      image.own_session_window = 0;
      uint32_t old = p.dial_settings.tunnel->buffer_size;
      TunnelConfig& keys = tunnel_keys(next);
      keys.buffer_size = kind == Image::kVersion1Right ? old : old / 2;
      keys.buffer_size_given = true;
    }
    p.dialer = make_io<Session>(p.loop, p.pool, next, image, &p.dial_owner);
    p.reconnect();
    CHECK(p.dialer->open() == (kind != Image::kVersion1Wrong));
    CHECK(p.acceptor->open() == (kind != Image::kVersion1Wrong));
  }
}

TEST_CASE("takeover: a version-1 image's max_data is tunnel.buffer_size where the file set it, else 16 KiB") {
  SessionImage image;
  TunnelConfig keys;
  keys.buffer_size = 64 * kKiB;   // the new process's default, or the file's
  image.own_max_data = 8 * kKiB;  // an image from version 2 on says
  CHECK(announced_max_data(image, keys) == 8 * kKiB);
  image.own_max_data = 0;  // a version-1 image does not
  keys.buffer_size_given = false;
  CHECK(announced_max_data(image, keys) == tunnel::kVersion1DefaultMaxData);
  keys.buffer_size_given = true;
  CHECK(announced_max_data(image, keys) == 64 * kKiB);
}

TEST_CASE("takeover: a session keeps what its first HELLO offered, through the resume of a newer process") {
  // An older process's HELLO did not offer origins (image version 3: no
  // capabilities): its peer sends none and expects none for the session's
  // life, so the new process must not start after its resume HELLO (which
  // offers them) either.
  for (bool older : {true, false}) {
    CAPTURE(older);
    Pair p;
    CHECK(p.dialer->origins());
    REQUIRE(p.dialer->freeze());
    p.accept_wire->fail("the old process closed it");
    p.loop.end_batch();
    SessionImage image;
    p.dialer->export_image(&image);
    CHECK((image.own_capabilities & kCapOrigin) != 0);
    p.dialer->close(SessionEnd::kLocalClose, "taken over", CloseMode::kAbort);
    if (older) image.own_capabilities = 0;
    p.dialer = make_io<Session>(p.loop, p.pool, p.dial_settings, image, &p.dial_owner);
    p.reconnect();
    REQUIRE(p.dialer->open());
    CHECK(p.dialer->origins() == !older);
  }
}

TEST_CASE("takeover: a session without resumption cannot be frozen; a failed takeover thaws") {
  SECTION("without resumption") {
    Pair p(resumable_settings("dialer", 0), resumable_settings("acceptor", 0));
    REQUIRE(p.dialer->open());
    CHECK_FALSE(p.dialer->freeze());
    CHECK(p.dialer->open());
  }
  SECTION("thawed, the dialer dials again and resumes") {
    Pair p;
    REQUIRE(p.dialer->freeze());
    p.accept_wire->fail("the old process closed it");
    p.loop.end_batch();
    CHECK_FALSE(p.dialer->wants_transport());
    p.dialer->thaw();
    p.loop.end_batch();
    CHECK(p.dial_owner.suspended == 1);
    p.reconnect();
    CHECK(p.dialer->open());
    CHECK(p.acceptor->open());
  }
}
