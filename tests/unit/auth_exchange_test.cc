// SPDX-License-Identifier: Apache-2.0
// tunnel::AuthExchange on its own: a dialer's and an acceptor's exchange,
// each on a fake transport, with the test carrying the frames between them
// (HELLOs as the sessions would send them). What each step sends, where
// records are turned on, and what each refusal says. Sessions that
// authenticate end to end: session_auth_test.cc.
#include "proxy/tunnel/auth_exchange.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/node_credentials.h"
#include "common/secret_keys.h"
#include "fake_transport.h"
#include "test_support.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;
using namespace rdmagw::test;
using Catch::Matchers::Contains;
using Kind = AuthExchange::Outcome::Kind;

namespace {

constexpr uint32_t kKiB = 1024;

AuthKeyring psk_ring(const std::string& key, bool encrypt = false) {
  auto keys = std::make_shared<SecretKeys>();
  keys->add(key);
  AuthKeyring ring{keys};
  ring.encrypt = encrypt;
  return ring;
}

std::string cert_text(const std::string& name) { return read_source_file("tests/unit/certs/" + name); }

AuthKeyring cert_ring(const std::string& node) {
  std::string error;
  auto creds = NodeCredentials::load({cert_text("ca-a.pem")}, cert_text(node + ".crt.pem"),
                                     cert_text(node + ".key.pem"), &error);
  INFO(error);
  REQUIRE(creds);
  AuthKeyring ring;
  ring.credentials = creds;
  return ring;
}

// A HELLO as a session of `ring` sends it: its payload and what it decodes to.
struct Hello {
  HelloPayload decoded;
  Bytes frame;
  Hello(const std::string& node, const AuthKeyring& ring) {
    decoded = hello(4 * kKiB, 64 * kKiB, 256 * kKiB, node);
    decoded.capabilities = kCapAuth | kCapBound;
    if (ring.certificates()) decoded.capabilities |= kCapCert;
    if (ring.encrypt) decoded.capabilities |= kCapEncrypt;
    frame = hello_bytes(decoded);
  }
  std::span<const uint8_t> payload() const { return std::span<const uint8_t>(frame).subspan(kHeaderSize); }
};

// An AUTH frame's payload as the peer would send it.
Bytes auth_payload(const AuthPayload& auth) {
  Bytes frame(auth_frame_size(auth));
  encode_auth(frame.data(), auth);
  return Bytes(frame.begin() + kHeaderSize, frame.end());
}

// Both sides of one transport: two fake wire ends and an exchange on each.
struct Exchanges {
  BufferPool pool{kBufferHeadroom + 4 * kKiB, 64};
  EventLoop loop;
  AuthKeyring dialer_ring, acceptor_ring;
  IoPtr<FakeTransport> dialer_wire, acceptor_wire;
  uint64_t dialer_frames = 0, acceptor_frames = 0;
  std::unique_ptr<AuthExchange> dialer, acceptor;
  Hello dialer_hello, acceptor_hello;

  Exchanges(AuthKeyring d, AuthKeyring a, std::string expected_peer = "")
      : dialer_ring(std::move(d)),
        acceptor_ring(std::move(a)),
        dialer_hello("dialer", dialer_ring),
        acceptor_hello("acceptor", acceptor_ring) {
    std::string error;
    if (!loop.init(16, &error)) FAIL("io_uring: " << error);
    dialer_wire = make_io<FakeTransport>(loop, pool, 4 * kKiB);
    acceptor_wire = make_io<FakeTransport>(loop, pool, 4 * kKiB);
    dialer = std::make_unique<AuthExchange>(AuthRole::kDialer, dialer_ring, *dialer_wire, std::move(expected_peer),
                                            &dialer_frames);
    acceptor = std::make_unique<AuthExchange>(AuthRole::kAcceptor, acceptor_ring, *acceptor_wire, "", &acceptor_frames);
  }
  ~Exchanges() {
    dialer.reset();
    acceptor.reset();
    dialer_wire.reset();
    acceptor_wire.reset();
    loop.shut_down();
  }

  // The AUTH frames one side queued since last asked.
  static std::vector<Frame> auth_frames(FakeTransport& wire) {
    std::vector<Frame> frames = wire.written();
    for (const Frame& f : frames) REQUIRE(f.type() == FrameType::kAuth);
    return frames;
  }
  // Hands `frames` to `to` one by one; the last step's outcome.
  static AuthExchange::Outcome deliver(AuthExchange& to, const std::vector<Frame>& frames) {
    AuthExchange::Outcome o;
    for (const Frame& f : frames) {
      o = to.on_auth(f.payload);
      if (o.kind != Kind::kWaiting) break;
    }
    return o;
  }

  // The exchange up to the dialer's proof, each step as the protocol says.
  void up_to_dialer_proof() {
    REQUIRE(dialer->after_our_hello(dialer_hello.payload()).kind == Kind::kWaiting);
    REQUIRE_FALSE(dialer->expects_hello());
    REQUIRE_FALSE(dialer->our_proof_sent());
    REQUIRE(acceptor->on_peer_hello(dialer_hello.payload(), dialer_hello.decoded).kind == Kind::kWaiting);
    REQUIRE(deliver(*acceptor, auth_frames(*dialer_wire)).kind == Kind::kWaiting);
    REQUIRE_FALSE(acceptor_wire->protected_records);  // nothing proved yet
    REQUIRE(deliver(*dialer, auth_frames(*acceptor_wire)).kind == Kind::kWaiting);
    CHECK(dialer->expects_hello());  // the acceptor's HELLO follows its proof of us
    CHECK(dialer->our_proof_sent());
    CHECK(dialer_wire->protected_records);  // right after our proof, which goes in clear
    CHECK(dialer_wire->queued_at_protect > 0);
    CHECK(dialer_wire->queued_at_protect == dialer_wire->queued_bytes());
  }
};

}  // namespace

TEST_CASE("auth exchange: psk, each side proves itself and turns its records on where the protocol says") {
  bool encrypt = GENERATE(false, true);
  Exchanges x(psk_ring(std::string(40, 'k'), encrypt), psk_ring(std::string(40, 'k'), encrypt));

  REQUIRE(x.dialer->after_our_hello(x.dialer_hello.payload()).kind == Kind::kWaiting);
  std::vector<Frame> challenge = Exchanges::auth_frames(*x.dialer_wire);
  REQUIRE(challenge.size() == 1);
  AuthPayload c = challenge[0].auth();
  CHECK(c.step == AuthStep::kChallenge);
  CHECK(c.has_dialed);
  CHECK(c.dialed == FakeTransport::test_ip(1));
  CHECK_FALSE(c.has_share);

  REQUIRE(x.acceptor->on_peer_hello(x.dialer_hello.payload(), x.dialer_hello.decoded).kind == Kind::kWaiting);
  CHECK(x.acceptor_wire->written().empty());  // nothing before the dialer's challenge
  REQUIRE(Exchanges::deliver(*x.acceptor, challenge).kind == Kind::kWaiting);
  std::vector<Frame> answer = Exchanges::auth_frames(*x.acceptor_wire);
  REQUIRE(answer.size() == 1);
  CHECK(answer[0].auth().step == AuthStep::kChallenge);
  CHECK_FALSE(answer[0].auth().has_dialed);  // only a nonce

  REQUIRE(Exchanges::deliver(*x.dialer, answer).kind == Kind::kWaiting);
  CHECK(x.dialer->expects_hello());
  CHECK(x.dialer_wire->protected_records);
  CHECK(x.dialer_wire->queued_at_protect == x.dialer_wire->queued_bytes());  // the proof in clear, then records
  CHECK(x.dialer_wire->protection == (encrypt ? Protection::kEncrypt : Protection::kAuthenticate));
  std::vector<Frame> dialer_proof = Exchanges::auth_frames(*x.dialer_wire);
  REQUIRE(dialer_proof.size() == 1);
  CHECK(dialer_proof[0].auth().step == AuthStep::kProof);

  AuthExchange::Outcome proved = Exchanges::deliver(*x.acceptor, dialer_proof);
  REQUIRE(proved.kind == Kind::kProved);
  CHECK(x.acceptor_wire->protected_records);  // before its HELLO, which goes in a record
  CHECK(x.acceptor_wire->queued_at_protect == 0);
  PeerProof proof = x.acceptor->take_peer_proof();
  CHECK(proof.kind == PeerProof::Kind::kKey);
  CHECK(proof.key == x.acceptor_ring.keys->id(0));
  CHECK(x.acceptor->take_peer_hello().node == "dialer");
  CHECK(x.acceptor_wire->written().empty());  // its proof waits for its HELLO

  REQUIRE(x.acceptor->after_our_hello(x.acceptor_hello.payload()).kind == Kind::kFinished);
  std::vector<Frame> acceptor_proof = Exchanges::auth_frames(*x.acceptor_wire);
  REQUIRE(acceptor_proof.size() == 1);
  CHECK(acceptor_proof[0].auth().step == AuthStep::kProof);

  REQUIRE(x.dialer->on_peer_hello(x.acceptor_hello.payload(), x.acceptor_hello.decoded).kind == Kind::kWaiting);
  CHECK_FALSE(x.dialer->expects_hello());
  REQUIRE(Exchanges::deliver(*x.dialer, acceptor_proof).kind == Kind::kProved);
  CHECK(x.dialer->take_peer_proof().kind == PeerProof::Kind::kKey);
  CHECK(x.dialer->take_peer_hello().node == "acceptor");

  // Each side's send key is the other's receive key, and the two differ.
  CHECK(x.dialer_wire->send_key == x.acceptor_wire->receive_key);
  CHECK(x.acceptor_wire->send_key == x.dialer_wire->receive_key);
  CHECK(x.dialer_wire->send_key != x.dialer_wire->receive_key);
  CHECK(x.dialer_frames == 2);  // challenge, proof
  CHECK(x.acceptor_frames == 2);
}

TEST_CASE("auth exchange: certificates, a key share in each challenge and a certificate and signature as proof") {
  Exchanges x(cert_ring("dialer"), cert_ring("acceptor"), "acceptor");
  x.up_to_dialer_proof();
  std::vector<Frame> dialer_proof = Exchanges::auth_frames(*x.dialer_wire);
  REQUIRE(dialer_proof.size() == 2);
  CHECK(dialer_proof[0].auth().step == AuthStep::kCertificate);
  CHECK(dialer_proof[1].auth().step == AuthStep::kSignature);
  REQUIRE(Exchanges::deliver(*x.acceptor, dialer_proof).kind == Kind::kProved);
  PeerProof proof = x.acceptor->take_peer_proof();
  CHECK(proof.kind == PeerProof::Kind::kCertificate);
  CHECK_FALSE(proof.certificate.empty());
  CHECK(proof.not_after > 0);

  REQUIRE(x.acceptor->after_our_hello(x.acceptor_hello.payload()).kind == Kind::kFinished);
  REQUIRE(x.dialer->on_peer_hello(x.acceptor_hello.payload(), x.acceptor_hello.decoded).kind == Kind::kWaiting);
  REQUIRE(Exchanges::deliver(*x.dialer, Exchanges::auth_frames(*x.acceptor_wire)).kind == Kind::kProved);
  CHECK(x.dialer->take_peer_proof().kind == PeerProof::Kind::kCertificate);
  // The record keys come from the two key shares: the same secret on both sides.
  CHECK(x.dialer_wire->send_key == x.acceptor_wire->receive_key);
  CHECK(x.acceptor_wire->send_key == x.dialer_wire->receive_key);
}

TEST_CASE("auth exchange: a certificate that names another node than the one dialed is refused") {
  Exchanges x(cert_ring("dialer"), cert_ring("acceptor"), "somebody-else");
  x.up_to_dialer_proof();
  REQUIRE(Exchanges::deliver(*x.acceptor, Exchanges::auth_frames(*x.dialer_wire)).kind == Kind::kProved);
  REQUIRE(x.acceptor->after_our_hello(x.acceptor_hello.payload()).kind == Kind::kFinished);
  REQUIRE(x.dialer->on_peer_hello(x.acceptor_hello.payload(), x.acceptor_hello.decoded).kind == Kind::kWaiting);
  AuthExchange::Outcome o = Exchanges::deliver(*x.dialer, Exchanges::auth_frames(*x.acceptor_wire));
  REQUIRE(o.kind == Kind::kRefused);
  CHECK(o.failure == AuthFailure::kWrongName);
  CHECK_THAT(o.reason, Contains("somebody-else"));
}

TEST_CASE("auth exchange: another key: the acceptor refuses the proof, having shown nothing but a nonce") {
  Exchanges x(psk_ring(std::string(40, 'a')), psk_ring(std::string(40, 'b')));
  x.up_to_dialer_proof();
  AuthExchange::Outcome o = Exchanges::deliver(*x.acceptor, Exchanges::auth_frames(*x.dialer_wire));
  REQUIRE(o.kind == Kind::kRefused);
  CHECK(o.failure == AuthFailure::kProof);
  CHECK_THAT(o.reason, Contains("matches none of our 1 keys"));
  CHECK_FALSE(x.acceptor_wire->protected_records);
  CHECK(x.acceptor_wire->written().empty());
  CHECK(x.acceptor_frames == 1);  // its challenge: a nonce
}

TEST_CASE("auth exchange: a challenge that names another address than the acceptor's is refused, nothing sent") {
  Exchanges x(psk_ring(std::string(40, 'k')), psk_ring(std::string(40, 'k')));
  x.acceptor_wire->local_ip = FakeTransport::test_ip(9);  // a relay: the dialer dialed .1, this host is .9
  REQUIRE(x.dialer->after_our_hello(x.dialer_hello.payload()).kind == Kind::kWaiting);
  REQUIRE(x.acceptor->on_peer_hello(x.dialer_hello.payload(), x.dialer_hello.decoded).kind == Kind::kWaiting);
  AuthExchange::Outcome o = Exchanges::deliver(*x.acceptor, Exchanges::auth_frames(*x.dialer_wire));
  REQUIRE(o.kind == Kind::kRefused);
  CHECK(o.failure == AuthFailure::kWrongAddress);
  CHECK_THAT(o.reason, Contains("the peer dialed 192.0.2.1, not this host's 192.0.2.9"));
  CHECK(x.acceptor_wire->written().empty());
}

TEST_CASE("auth exchange: a HELLO that does not authenticate as this side does is refused, saying which") {
  struct Case {
    const char* name;
    uint32_t capabilities;
    bool acceptor_encrypts;
    const char* reason;
  };
  Case c = GENERATE(
      Case{"no auth", 0, false, "the peer does not authenticate (its tunnel.auth.mode is none, or it is no rdmagw)"},
      Case{"an older rdmagw", kCapAuth, false, "the peer is an older rdmagw"},
      Case{"certificates", kCapAuth | kCapBound | kCapCert, false, "the peer authenticates with a cert"},
      Case{"encrypts", kCapAuth | kCapBound | kCapEncrypt, false, "the peer encrypts"},
      Case{"does not encrypt", kCapAuth | kCapBound, true, "this side encrypts"});
  INFO(c.name);
  Exchanges x(psk_ring(std::string(40, 'k')), psk_ring(std::string(40, 'k'), c.acceptor_encrypts));
  HelloPayload h = x.dialer_hello.decoded;
  h.capabilities = c.capabilities;
  AuthExchange::Outcome o = x.acceptor->on_peer_hello(x.dialer_hello.payload(), h);
  REQUIRE(o.kind == Kind::kRefused);
  CHECK(o.failure == AuthFailure::kMismatch);
  CHECK_THAT(o.reason, Contains(c.reason));
}

TEST_CASE("auth exchange: AUTH frames out of turn or malformed are protocol errors") {
  Exchanges x(psk_ring(std::string(40, 'k')), psk_ring(std::string(40, 'k')));
  REQUIRE(x.acceptor->on_peer_hello(x.dialer_hello.payload(), x.dialer_hello.decoded).kind == Kind::kWaiting);
  SECTION("a proof before the challenge") {
    AuthPayload proof;
    proof.step = AuthStep::kProof;
    AuthExchange::Outcome o = x.acceptor->on_auth(auth_payload(proof));
    REQUIRE(o.kind == Kind::kProtocolError);
    CHECK_THAT(o.reason, Contains("AUTH proof out of turn (challenge expected)"));
  }
  SECTION("a dialer's challenge without the address it dialed") {
    AuthPayload challenge;
    challenge.step = AuthStep::kChallenge;
    AuthExchange::Outcome o = x.acceptor->on_auth(auth_payload(challenge));
    REQUIRE(o.kind == Kind::kProtocolError);
    CHECK_THAT(o.reason, Contains("does not name the address it dialed"));
  }
  SECTION("a payload of the wrong size") {
    Bytes payload(5, 1);
    AuthExchange::Outcome o = x.acceptor->on_auth(payload);
    REQUIRE(o.kind == Kind::kProtocolError);
    CHECK_FALSE(o.reason.empty());
  }
  CHECK(x.acceptor_wire->written().empty());
}

TEST_CASE("auth exchange: a HELLO that names another node than the peer's certificate is refused") {
  Exchanges x(cert_ring("dialer"), cert_ring("acceptor"));
  x.up_to_dialer_proof();
  REQUIRE(Exchanges::deliver(*x.acceptor, Exchanges::auth_frames(*x.dialer_wire)).kind == Kind::kProved);
  REQUIRE(x.acceptor->after_our_hello(x.acceptor_hello.payload()).kind == Kind::kFinished);
  HelloPayload impostor = x.acceptor_hello.decoded;
  impostor.node = "impostor";
  REQUIRE(x.dialer->on_peer_hello(x.acceptor_hello.payload(), impostor).kind == Kind::kWaiting);
  AuthExchange::Outcome o = Exchanges::deliver(*x.dialer, Exchanges::auth_frames(*x.acceptor_wire));
  REQUIRE(o.kind == Kind::kRefused);
  CHECK(o.failure == AuthFailure::kWrongName);
  CHECK_THAT(o.reason, Contains("the peer calls itself impostor in HELLO, but its certificate names acceptor"));
}

TEST_CASE("auth exchange: a dialer whose acceptor does not authenticate says which setting") {
  Exchanges x(psk_ring(std::string(40, 'k')), psk_ring(std::string(40, 'k')));
  HelloPayload h = x.acceptor_hello.decoded;
  h.capabilities = 0;
  AuthExchange::Outcome o = x.dialer->on_peer_hello(x.acceptor_hello.payload(), h);
  REQUIRE(o.kind == Kind::kRefused);
  CHECK(o.failure == AuthFailure::kMismatch);
  CHECK(o.reason == "the peer does not authenticate (its tunnel.auth.mode is none)");
}
