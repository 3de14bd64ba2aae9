// SPDX-License-Identifier: Apache-2.0
// Authentication with a pre-shared key (docs/protocol.md, "Authentication"):
// sessions over fake transports, and an acceptor facing a peer the test
// plays frame by frame, which knows the protocol but maybe not the key.
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/secret_keys.h"
#include "fake_stream.h"
#include "fake_transport.h"
#include "proxy/tunnel/peer_auth.h"
#include "proxy/tunnel/session.h"
#include "session_pair.h"
#include "test_support.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;
using namespace rdmagw::test;
using Catch::Matchers::Contains;
using rdmagw::test::read_source_file;

namespace {

const std::string kKeyA(40, 'a');
const std::string kKeyB(40, 'b');

AuthKeyring keyring(std::initializer_list<std::string> keys) {
  auto k = std::make_shared<SecretKeys>();
  for (const auto& key : keys) k->add(key);
  return AuthKeyring{k};
}

SessionSettings with_keys(SessionSettings s, const AuthKeyring* ring) {
  s.auth = ring;
  return s;
}

Bytes auth_bytes(AuthStep step, const AuthValue& value, const IpBytes* dialed = nullptr) {
  AuthPayload a{step, value};
  if (dialed) {
    a.has_dialed = true;
    a.dialed = *dialed;
  }
  Bytes out(kHeaderSize + (dialed ? kAuthDialerChallengeSize : kAuthPayloadSize));
  encode_auth(out.data(), a);
  return out;
}

// A stream opened over the pair carries `data` from dialer to acceptor.
bool carries(Pair& p, const std::string& data) {
  FakeStream a, b;
  p.open_stream_pair(a, b);
  if (p.send(*p.dialer, a, data, 0) != data.size()) return false;
  p.pump();
  return b.received == data;
}

// An acceptor session on a fake transport; the test is its dialer.
struct Acceptor {
  BufferPool pool{kBufferHeadroom + 4 * kKiB, 256};
  EventLoop loop;
  FakeOwner owner;
  AuthKeyring ring;
  SessionSettings settings;
  FakeTransport* wire = nullptr;
  IoPtr<Session> session;

  explicit Acceptor(AuthKeyring keys)
      : ring(std::move(keys)), settings(with_keys(resumable_settings("acceptor", 0), &ring)) {
    log::set_level(log::Level::kError);
    std::string error;
    if (!loop.init(64, &error)) FAIL("io_uring: " << error);
    auto t = make_io<FakeTransport>(loop, pool, 4 * kKiB);
    wire = t.get();
    session = make_io<Session>(loop, pool, Session::Role::kAcceptor, settings, IoPtr<Transport>(t.release()), &owner);
    session->start();
  }
  ~Acceptor() {
    session.reset();
    loop.shut_down();
  }
};

// The dialer's side of the exchange, as the test plays it.
struct TestDialer {
  HelloPayload hello = rdmagw::test::hello(4 * kKiB, 64 * kKiB, 256 * kKiB, "dialer");
  Bytes hello_frame;
  AuthValue nonce{};
  IpBytes dialed = FakeTransport::test_ip(1);  // where the acceptor's fake wire is reached
  TestDialer() {
    hello.capabilities = kCapAuth | kCapBound;
    hello_frame = hello_bytes(hello);
    nonce.fill(7);
  }
  std::span<const uint8_t> hello_payload() const { return std::span<const uint8_t>(hello_frame).subspan(kHeaderSize); }
  AuthTranscript transcript(const AuthValue& acceptor_nonce, std::span<const uint8_t> acceptor_hello = {}) const {
    AuthTranscript t;
    t.transport = TransportKind::kTcp;
    t.dialer_hello = hello_payload();
    t.acceptor_hello = acceptor_hello;
    t.dialer_nonce = nonce;
    t.acceptor_nonce = acceptor_nonce;
    t.dialed = dialed;
    return t;
  }
  Bytes challenge() const { return auth_bytes(AuthStep::kChallenge, nonce, &dialed); }
};

}  // namespace

TEST_CASE("auth: proofs bind the key, the role, both nonces, both HELLOs and the address dialed") {
  AuthTranscript t;
  Bytes hello_d = {1, 2, 3}, hello_a = {4, 5};
  t.dialer_hello = hello_d;
  t.acceptor_hello = hello_a;
  t.dialer_nonce.fill(1);
  t.acceptor_nonce.fill(2);
  SecretKeys keys;
  keys.add(kKeyA);
  AuthValue proof = auth_proof(keys.key(0), AuthRole::kAcceptor, t);
  CHECK(verify_auth_proof(keys, AuthRole::kAcceptor, t, proof));
  CHECK_FALSE(verify_auth_proof(keys, AuthRole::kDialer, t, proof));  // no reflection

  SecretKeys other;
  other.add(kKeyB);
  CHECK_FALSE(verify_auth_proof(other, AuthRole::kAcceptor, t, proof));
  SecretKeys both;
  both.add(kKeyB);
  both.add(kKeyA);
  CHECK(verify_auth_proof(both, AuthRole::kAcceptor, t, proof));  // any listed key verifies

  AuthTranscript changed = t;
  changed.dialer_nonce[31] ^= 1;
  CHECK_FALSE(verify_auth_proof(keys, AuthRole::kAcceptor, changed, proof));
  changed = t;
  changed.acceptor_nonce[0] ^= 1;
  CHECK_FALSE(verify_auth_proof(keys, AuthRole::kAcceptor, changed, proof));
  changed = t;
  changed.transport = TransportKind::kRdma;
  CHECK_FALSE(verify_auth_proof(keys, AuthRole::kAcceptor, changed, proof));
  changed = t;
  changed.dialed[15] ^= 1;  // a proof made for another host
  CHECK_FALSE(verify_auth_proof(keys, AuthRole::kAcceptor, changed, proof));
  Bytes other_hello = {4, 6};
  changed = t;
  changed.acceptor_hello = other_hello;
  CHECK_FALSE(verify_auth_proof(keys, AuthRole::kAcceptor, changed, proof));
  // Moving a byte from one HELLO to the other changes the transcript too.
  Bytes shifted_d = {1, 2}, shifted_a = {3, 4, 5};
  changed = t;
  changed.dialer_hello = shifted_d;
  changed.acceptor_hello = shifted_a;
  CHECK_FALSE(verify_auth_proof(keys, AuthRole::kAcceptor, changed, proof));

  AuthValue a{}, b{};
  REQUIRE(draw_nonce(&a));
  REQUIRE(draw_nonce(&b));
  CHECK(a != b);
}

TEST_CASE("auth: two sidecars with the same key open a session, resumable or not") {
  AuthKeyring ring = keyring({kKeyA});
  uint32_t resume = GENERATE(0u, 10000u);
  Pair p(with_keys(resumable_settings("dialer", resume), &ring),
         with_keys(resumable_settings("acceptor", resume), &ring));
  REQUIRE(p.dialer->open());
  REQUIRE(p.acceptor->open());
  CHECK(p.dialer->peer_node() == "acceptor");
  CHECK(p.acceptor->peer_node() == "dialer");
  CHECK(p.dialer->resumable() == (resume > 0));

  CHECK(carries(p, "authenticated bytes"));
}

TEST_CASE("auth: rotation: the first key proves, every listed key verifies") {
  AuthKeyring old_only = keyring({kKeyA});
  AuthKeyring old_then_new = keyring({kKeyA, kKeyB});
  AuthKeyring new_then_old = keyring({kKeyB, kKeyA});
  AuthKeyring new_only = keyring({kKeyB});
  auto opens = [](const AuthKeyring& d, const AuthKeyring& a) {
    Pair p(with_keys(resumable_settings("dialer"), &d), with_keys(resumable_settings("acceptor"), &a));
    return p.dialer->open() && p.acceptor->open();
  };
  // Step 1 (the new key added as second everywhere) and step 2 (made first,
  // host by host): every mix of the two stages still connects.
  CHECK(opens(old_only, old_then_new));
  CHECK(opens(old_then_new, old_only));
  CHECK(opens(new_then_old, old_then_new));
  CHECK(opens(old_then_new, new_then_old));
  // Step 3 (the old key removed) once every host proves with the new one.
  CHECK(opens(new_only, new_then_old));
  CHECK(opens(new_then_old, new_only));
  // What rotation must never skip: a host that proves with a key its peer does not list.
  CHECK_FALSE(opens(new_only, old_only));
  CHECK_FALSE(opens(new_then_old, old_only));
}

TEST_CASE("auth: different keys: neither side opens, the acceptor shows nothing but a nonce") {
  AuthKeyring ring_a = keyring({kKeyA}), ring_b = keyring({kKeyB});
  Pair p(with_keys(resumable_settings("dialer"), &ring_a), with_keys(resumable_settings("acceptor"), &ring_b));
  CHECK_FALSE(p.dialer->open());
  CHECK(p.acceptor->state() == Session::State::kClosed);
  p.loop.end_batch();
  REQUIRE(p.accept_owner.closed.size() == 1);
  CHECK(p.accept_owner.closed[0].end == SessionEnd::kAuthFailed);
  CHECK_THAT(p.accept_owner.closed[0].reason, Contains("matches none of our 1 keys"));
  CHECK(p.accept_owner.opened == 0);
  CHECK(p.dial_owner.opened == 0);
  // The dialer heard nothing back but the acceptor's challenge, then the
  // end of the transport (which the fake wires do not carry: the test does).
  CHECK(p.dialer->state() == Session::State::kHandshake);
  p.dial_wire->fail("the acceptor closed it", metrics::TransportLoss::kPeerClosed);
  p.loop.end_batch();
  REQUIRE(p.dial_owner.closed.size() == 1);
  CHECK(p.dial_owner.closed[0].end == SessionEnd::kAuthFailed);
  CHECK_THAT(p.dial_owner.closed[0].reason, Contains("ended the connection after our proof"));
  CHECK(p.dialer->peer_node().empty());
}

TEST_CASE("auth: a transport that fails after our proof is not a refusal: no auth failure counted") {
  // The acceptor refuses with a clean end (FIN, RDMA disconnect); a reset,
  // a local abort (ss -K on the connection) or an I/O error is the carrier
  // failing mid-handshake, which counts as a transport loss instead.
  AuthKeyring ring_a = keyring({kKeyA}), ring_b = keyring({kKeyB});
  metrics::WorkerMetrics dial_metrics;
  SessionSettings d = with_keys(resumable_settings("dialer"), &ring_a);
  d.metrics = &dial_metrics;
  Pair p(d, with_keys(resumable_settings("acceptor"), &ring_b));
  CHECK_FALSE(p.dialer->open());
  p.loop.end_batch();
  REQUIRE(p.dialer->state() == Session::State::kHandshake);
  p.dial_wire->fail("recv: Software caused connection abort", metrics::TransportLoss::kIoError);
  p.loop.end_batch();
  REQUIRE(p.dial_owner.closed.size() == 1);
  CHECK(p.dial_owner.closed[0].end == SessionEnd::kTransportFailed);
  CHECK_THAT(p.dial_owner.closed[0].reason, Contains("Software caused connection abort"));
  for (size_t i = 0; i < dial_metrics.auth_failures.size(); ++i) CHECK(dial_metrics.auth_failures[i].value() == 0);
}

TEST_CASE("auth: one side without a key: refused with a reason that names the setting") {
  AuthKeyring ring = keyring({kKeyA});
  SECTION("the acceptor authenticates, the dialer does not") {
    Pair p(resumable_settings("dialer"), with_keys(resumable_settings("acceptor"), &ring));
    p.loop.end_batch();
    REQUIRE(p.accept_owner.closed.size() == 1);
    CHECK(p.accept_owner.closed[0].end == SessionEnd::kAuthFailed);
    CHECK_THAT(p.accept_owner.closed[0].reason, Contains("the peer does not authenticate"));
    CHECK_FALSE(p.dialer->open());
  }
  SECTION("the dialer authenticates, the acceptor does not") {
    Pair p(with_keys(resumable_settings("dialer"), &ring), resumable_settings("acceptor"));
    p.loop.end_batch();
    REQUIRE(p.dial_owner.closed.size() == 1);
    CHECK(p.dial_owner.closed[0].end == SessionEnd::kAuthFailed);
    CHECK_THAT(p.dial_owner.closed[0].reason, Contains("tunnel.auth.mode is none"));
    REQUIRE(p.accept_owner.closed.size() == 1);
    CHECK_THAT(p.accept_owner.closed[0].reason, Contains("tunnel.auth.mode is none here"));
  }
}

TEST_CASE("auth: a resumed session authenticates its new transport again") {
  AuthKeyring ring = keyring({kKeyA});
  Pair p(with_keys(resumable_settings("dialer"), &ring), with_keys(resumable_settings("acceptor"), &ring));
  FakeStream a, b;
  p.open_stream_pair(a, b);
  std::string data(20000, 'r');
  size_t sent = p.send(*p.dialer, a, data, 0);
  p.deliver_part(2);
  p.cut();
  p.reconnect();
  REQUIRE(p.dialer->open());
  CHECK(p.dialer->counters().resumes == 1);
  sent = p.send(*p.dialer, a, data, sent);
  p.pump();
  CHECK(b.received == data.substr(0, sent));
}

TEST_CASE("auth: an acceptor facing a peer without the key") {
  Acceptor acc(keyring({kKeyA}));
  TestDialer d;
  acc.wire->inject(cat({d.hello_frame, d.challenge()}));
  auto w = acc.wire->written();
  // Before the peer proves anything: a nonce, nothing else (no HELLO, no name, no HMAC).
  REQUIRE(w.size() == 1);
  AuthPayload challenge = w[0].auth();
  CHECK(challenge.step == AuthStep::kChallenge);

  SECTION("a proof under another key ends the transport without a word") {
    SecretKeys wrong;
    wrong.add(kKeyB);
    AuthValue proof = auth_proof(wrong.key(0), AuthRole::kDialer, d.transcript(challenge.value));
    acc.wire->inject(auth_bytes(AuthStep::kProof, proof));
    CHECK(acc.wire->written().empty());
    CHECK(acc.session->state() == Session::State::kClosed);
    CHECK(acc.wire->closed());
    acc.loop.end_batch();
    REQUIRE(acc.owner.closed.size() == 1);
    CHECK(acc.owner.closed[0].end == SessionEnd::kAuthFailed);
  }
  SECTION("a proof replayed from another connection (another nonce) fails") {
    SecretKeys right;
    right.add(kKeyA);
    AuthValue stale = challenge.value;
    stale[0] ^= 0xff;
    acc.wire->inject(auth_bytes(AuthStep::kProof, auth_proof(right.key(0), AuthRole::kDialer, d.transcript(stale))));
    CHECK(acc.wire->written().empty());
    CHECK(acc.session->state() == Session::State::kClosed);
  }
  SECTION("frames other than AUTH before the proof are a protocol error, and open nothing") {
    acc.wire->inject(open_bytes(1, "tcp:127.0.0.1:22"));
    CHECK(acc.session->state() == Session::State::kClosed);
    CHECK(acc.owner.open_requests.empty());
    CHECK(acc.wire->written().empty());
  }
  SECTION("a proof out of turn is a protocol error") {
    acc.wire->inject(auth_bytes(AuthStep::kChallenge, d.nonce));
    CHECK(acc.session->state() == Session::State::kClosed);
    CHECK(acc.wire->written().empty());
  }
  SECTION("the right proof: the acceptor answers with its HELLO and a proof the dialer can check") {
    SecretKeys right;
    right.add(kKeyA);
    acc.wire->inject(
        auth_bytes(AuthStep::kProof, auth_proof(right.key(0), AuthRole::kDialer, d.transcript(challenge.value))));
    auto answer = acc.wire->written();
    REQUIRE(answer.size() == 2);
    REQUIRE(answer[0].type() == FrameType::kHello);
    HelloPayload theirs;
    std::string reason;
    REQUIRE(decode_hello(answer[0].payload, &theirs, &reason));
    CHECK(theirs.node == "acceptor");
    CHECK((theirs.capabilities & kCapAuth) != 0);
    AuthPayload proof = answer[1].auth();
    CHECK(proof.step == AuthStep::kProof);
    CHECK(verify_auth_proof(right, AuthRole::kAcceptor, d.transcript(challenge.value, answer[0].payload), proof.value));
    CHECK(acc.session->open());
  }
}

TEST_CASE("auth: an acceptor with a key refuses a HELLO that does not offer authentication") {
  Acceptor acc(keyring({kKeyA}));
  HelloPayload h = hello(4 * kKiB, 64 * kKiB, 256 * kKiB, "plain");
  acc.wire->inject(hello_bytes(h));
  CHECK(acc.wire->written().empty());
  CHECK(acc.session->state() == Session::State::kClosed);
}

// A keyless host the dialer reached (its address in peer_cidrs, say) passes
// the dialer's HELLO and challenge to a real member and the answers back:
// the challenge names the relay's address, which the member refuses before
// it shows anything but a nonce would have.
TEST_CASE("auth: an acceptor refuses a dialer that dialed another address (a relay)") {
  Acceptor acc(keyring({kKeyA}));
  TestDialer d;
  d.dialed = FakeTransport::test_ip(9);  // the relay's address
  acc.wire->inject(cat({d.hello_frame, d.challenge()}));
  CHECK(acc.wire->written().empty());
  CHECK(acc.session->state() == Session::State::kClosed);
  acc.loop.end_batch();
  REQUIRE(acc.owner.closed.size() == 1);
  CHECK(acc.owner.closed[0].end == SessionEnd::kAuthFailed);
  CHECK_THAT(acc.owner.closed[0].reason, Contains("the peer dialed 192.0.2.9, not this host's 192.0.2.1"));
}

TEST_CASE("auth: an older peer (no kCapBound, a challenge without the address) is refused, saying why") {
  SECTION("its HELLO") {
    Acceptor acc(keyring({kKeyA}));
    TestDialer d;
    d.hello.capabilities = kCapAuth;
    d.hello_frame = hello_bytes(d.hello);
    acc.wire->inject(cat({d.hello_frame, d.challenge()}));
    CHECK(acc.wire->written().empty());
    acc.loop.end_batch();
    REQUIRE(acc.owner.closed.size() == 1);
    CHECK_THAT(acc.owner.closed[0].reason, Contains("the peer is an older rdmagw"));
  }
  SECTION("its challenge") {
    Acceptor acc(keyring({kKeyA}));
    TestDialer d;
    acc.wire->inject(cat({d.hello_frame, auth_bytes(AuthStep::kChallenge, d.nonce)}));
    CHECK(acc.wire->written().empty());
    acc.loop.end_batch();
    REQUIRE(acc.owner.closed.size() == 1);
    CHECK_THAT(acc.owner.closed[0].reason, Contains("does not name the address it dialed"));
  }
}

TEST_CASE("auth: every authenticated transport seals its records, with the keys its peer opens them with") {
  bool encrypt = GENERATE(false, true);
  AuthKeyring ring = keyring({kKeyA});
  ring.encrypt = encrypt;
  Pair p(with_keys(resumable_settings("dialer"), &ring), with_keys(resumable_settings("acceptor"), &ring));
  REQUIRE(p.dialer->open());
  for (FakeTransport* w : {p.dial_wire, p.accept_wire}) {
    CHECK(w->protected_records);
    CHECK(w->protection == (encrypt ? Protection::kEncrypt : Protection::kAuthenticate));
  }
  CHECK(p.dial_wire->send_key == p.accept_wire->receive_key);
  CHECK(p.accept_wire->send_key == p.dial_wire->receive_key);
  CHECK(p.dial_wire->send_key != p.dial_wire->receive_key);
}

// --- tunnel.auth.mode cert: certificates from tests/unit/certs (make.py) ---

namespace {

std::string read_text(const std::string& name) { return read_source_file("tests/unit/certs/" + name); }

AuthKeyring cert_ring(const std::string& node, std::initializer_list<const char*> cas = {"ca-a.pem"},
                      bool encrypt = false) {
  std::vector<std::string> ca_pems;
  for (const char* c : cas) ca_pems.push_back(read_text(c));
  std::string error;
  auto creds = NodeCredentials::load(ca_pems, read_text(node + ".crt.pem"), read_text(node + ".key.pem"), &error);
  INFO(error);
  REQUIRE(creds);
  AuthKeyring ring;
  ring.credentials = creds;
  ring.encrypt = encrypt;
  return ring;
}

SessionSettings named(SessionSettings s, const AuthKeyring* ring, std::string expected_peer = "") {
  s.auth = ring;
  s.expected_peer = std::move(expected_peer);
  return s;
}

}  // namespace

TEST_CASE("cert: two nodes with certificates of one CA open a session; names come from the certificates") {
  bool encrypt = GENERATE(false, true);
  AuthKeyring d = cert_ring("dialer", {"ca-a.pem"}, encrypt), a = cert_ring("acceptor", {"ca-a.pem"}, encrypt);
  Pair p(named(resumable_settings("dialer"), &d, "acceptor"), named(resumable_settings("acceptor"), &a));
  REQUIRE(p.dialer->open());
  REQUIRE(p.acceptor->open());
  CHECK(p.dialer->peer_node() == "acceptor");
  CHECK(p.acceptor->peer_node() == "dialer");
  CHECK(p.dial_wire->protected_records);
  CHECK(p.dial_wire->send_key == p.accept_wire->receive_key);
  CHECK(p.accept_wire->send_key == p.dial_wire->receive_key);
  CHECK(carries(p, "carried under certificates"));
  // A resumed session proves itself again on its new transport.
  p.cut();
  p.reconnect();
  REQUIRE(p.dialer->open());
  CHECK(p.dialer->counters().resumes == 1);
}

TEST_CASE("cert: each bad certificate is refused with its reason") {
  struct Case {
    const char* what;
    const char* dialer_cert;
    const char* acceptor_cert;
    std::string expected_peer;
    bool acceptor_refuses;  // else the dialer does
    const char* says;
  };
  const Case cases[] = {
      {"expired", "dialer-expired", "acceptor", "acceptor", true, "certificate has expired"},
      {"another CA", "dialer", "acceptor-other-ca", "acceptor", false, "unable to get local issuer certificate"},
      {"another name", "dialer", "acceptor", "host-b", false, "names node acceptor, not host-b"},
      {"not for the address dialed", "dialer", "acceptor-elsewhere", "acceptor", false, "does not list 192.0.2.1"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    // Each side trusts both CAs here, so that only the case's point fails.
    AuthKeyring d = cert_ring(c.dialer_cert, {"ca-a.pem"});
    AuthKeyring a = cert_ring(c.acceptor_cert, {"ca-a.pem", "ca-b.pem"});
    Pair p(named(resumable_settings("dialer"), &d, c.expected_peer), named(resumable_settings("acceptor"), &a));
    p.loop.end_batch();
    CHECK_FALSE(p.dialer->open());
    auto& closed = c.acceptor_refuses ? p.accept_owner.closed : p.dial_owner.closed;
    REQUIRE(closed.size() == 1);
    CHECK(closed[0].end == SessionEnd::kAuthFailed);
    CHECK_THAT(closed[0].reason, Contains(c.says));
  }
}

TEST_CASE("cert: a psk side and a cert side refuse each other, saying which is which") {
  AuthKeyring psk = keyring({kKeyA});
  AuthKeyring cert = cert_ring("acceptor");
  Pair p(with_keys(resumable_settings("dialer"), &psk), named(resumable_settings("acceptor"), &cert));
  p.loop.end_batch();
  REQUIRE(p.accept_owner.closed.size() == 1);
  CHECK_THAT(p.accept_owner.closed[0].reason, Contains("this side authenticates with a certificate"));
}

TEST_CASE("cert: node credentials are checked when loaded") {
  std::string error;
  CHECK_FALSE(
      NodeCredentials::load({read_text("ca-b.pem")}, read_text("dialer.crt.pem"), read_text("dialer.key.pem"), &error));
  CHECK_THAT(error, Contains("cert_file: the certificate does not verify against ca_files"));
  CHECK_FALSE(NodeCredentials::load({read_text("ca-a.pem")}, read_text("dialer.crt.pem"), read_text("acceptor.key.pem"),
                                    &error));
  CHECK_THAT(error, Contains("key_file: the key is not cert_file's"));
  CHECK_FALSE(
      NodeCredentials::load({"not a certificate"}, read_text("dialer.crt.pem"), read_text("dialer.key.pem"), &error));
  CHECK_THAT(error, Contains("ca_files[0]: no PEM certificate in it"));
  // An expired certificate of our own loads (the process says so and peers
  // refuse it), with its negative time left.
  auto expired = NodeCredentials::load({read_text("ca-a.pem")}, read_text("dialer-expired.crt.pem"),
                                       read_text("dialer-expired.key.pem"), &error);
  REQUIRE(expired);
  CHECK(expired->seconds_left() < 0);
  auto good =
      NodeCredentials::load({read_text("ca-a.pem")}, read_text("dialer.crt.pem"), read_text("dialer.key.pem"), &error);
  REQUIRE(good);
  CHECK(good->name() == "dialer");
  REQUIRE(good->addresses().size() == 1);
  CHECK(ip_bytes_text(good->addresses()[0]) == "192.0.2.1");
  CHECK(good->seconds_left() > 0);
}

// --- revocation: what a session's peer proved itself with, checked again --

namespace {
// A PEM certificate's DER, as a peer sends it.
std::string der_of_pem(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  REQUIRE(cert);
  unsigned char* der = nullptr;
  int n = i2d_X509(cert, &der);
  X509_free(cert);
  REQUIRE(n > 0);
  std::string out(reinterpret_cast<char*>(der), static_cast<size_t>(n));
  OPENSSL_free(der);
  return out;
}

std::shared_ptr<const NodeCredentials> credentials(std::initializer_list<const char*> cas, const std::string& node) {
  std::vector<std::string> ca_pems;
  for (const char* c : cas) ca_pems.push_back(read_text(c));
  std::string error;
  auto creds = NodeCredentials::load(ca_pems, read_text(node + ".crt.pem"), read_text(node + ".key.pem"), &error);
  INFO(error);
  REQUIRE(creds);
  return creds;
}
}  // namespace

TEST_CASE("revocation: a key removed from the keyring ends the sessions its proofs opened; others go on") {
  AuthKeyring d = keyring({kKeyA}), a = keyring({kKeyA, kKeyB});
  Pair p(with_keys(resumable_settings("dialer"), &d), with_keys(resumable_settings("acceptor"), &a));
  REQUIRE(p.dialer->open());
  REQUIRE(p.acceptor->open());
  CHECK(p.acceptor->peer_proof().kind == PeerProof::Kind::kKey);
  // A reload that keeps the key the dialer proved with changes nothing.
  a.keys = keyring({kKeyB, kKeyA}).keys;
  CHECK(p.acceptor->recheck_peer());
  CHECK(p.acceptor->open());
  // One that removes it ends the session, saying why.
  a.keys = keyring({kKeyB}).keys;
  CHECK_FALSE(p.acceptor->recheck_peer());
  p.loop.end_batch();
  REQUIRE(p.accept_owner.closed.size() == 1);
  CHECK(p.accept_owner.closed[0].end == SessionEnd::kRevoked);
  CHECK_THAT(p.accept_owner.closed[0].reason, Contains("no longer in tunnel.auth.key_files"));
}

TEST_CASE("revocation: a CA removed from the keyring ends the sessions its certificates opened") {
  AuthKeyring d = cert_ring("dialer", {"ca-a.pem"}), a = cert_ring("acceptor", {"ca-a.pem"});
  Pair p(named(resumable_settings("dialer"), &d, "acceptor"), named(resumable_settings("acceptor"), &a));
  REQUIRE(p.acceptor->open());
  REQUIRE(p.acceptor->peer_proof().kind == PeerProof::Kind::kCertificate);
  CHECK(p.acceptor->peer_proof().not_after > 0);
  // Both CAs trusted: the dialer's certificate still verifies.
  a.credentials = credentials({"ca-a.pem", "ca-b.pem"}, "acceptor-other-ca");
  CHECK(p.acceptor->recheck_peer());
  // Only the new CA: it does not.
  a.credentials = credentials({"ca-b.pem"}, "acceptor-other-ca");
  CHECK_FALSE(p.acceptor->recheck_peer());
  p.loop.end_batch();
  REQUIRE(p.accept_owner.closed.size() == 1);
  CHECK(p.accept_owner.closed[0].end == SessionEnd::kRevoked);
  CHECK_THAT(p.accept_owner.closed[0].reason, Contains("unable to get local issuer certificate"));
}

TEST_CASE("revocation: a session that re-authenticates proves itself with the keys of now, its streams only paused") {
  AuthKeyring d = keyring({kKeyA}), a = keyring({kKeyA, kKeyB});
  Pair p(with_keys(resumable_settings("dialer"), &d), with_keys(resumable_settings("acceptor"), &a));
  REQUIRE(p.dialer->open());
  FakeStream x, y;
  p.open_stream_pair(x, y);
  // The dialer's first key changes: its open session moves to a new
  // transport, where it proves itself with the new key.
  d.keys = keyring({kKeyB, kKeyA}).keys;
  REQUIRE(p.dialer->reauthenticate("test: a new first key"));
  p.accept_wire->fail("the dialer let its transport go");
  p.loop.end_batch();
  p.reconnect();
  REQUIRE(p.dialer->open());
  CHECK(p.dialer->counters().resumes == 1);
  // The acceptor now holds the new key's proof: dropping the old key ends nothing.
  a.keys = keyring({kKeyB}).keys;
  CHECK(p.acceptor->recheck_peer());
  CHECK(p.send(*p.dialer, x, "after", 0) == 5);
  p.pump();
  CHECK(y.received == "after");
  CHECK(p.dial_owner.closed.empty());
  CHECK(p.acceptor->open());
  for (const auto& c : p.accept_owner.closed) CHECK(c.end != SessionEnd::kRevoked);  // the resume's shell only
  // A session that is not resumable cannot move.
  Pair q(with_keys(resumable_settings("dialer", 0), &d), with_keys(resumable_settings("acceptor", 0), &a));
  REQUIRE(q.dialer->open());
  CHECK_FALSE(q.dialer->reauthenticate("test"));
  CHECK(q.dialer->open());
}

TEST_CASE("cert: what is no node certificate is refused, saying why") {
  auto ring = credentials({"ca-a.pem"}, "acceptor");
  struct Case {
    const char* file;
    AuthFailure failure;
    const char* says;
  };
  const Case cases[] = {
      {"dialer-is-a-ca", AuthFailure::kNotANode, "CA:TRUE"},
      {"dialer-server-only", AuthFailure::kNotANode, "clientAuth"},
      {"dialer-cannot-sign", AuthFailure::kNotANode, "digitalSignature"},
      {"dialer-bad-name", AuthFailure::kWrongName, "not a node name: byte 2 is 0x1b"},
  };
  for (const Case& c : cases) {
    INFO(c.file);
    std::string der = der_of_pem(read_text(std::string(c.file) + ".crt.pem"));
    VerifiedPeer peer;
    AuthFailure failure = AuthFailure::kMalformed;
    std::string detail;
    CHECK_FALSE(ring->check_certificate(std::span(reinterpret_cast<const uint8_t*>(der.data()), der.size()), &peer,
                                        &failure, &detail));
    CHECK(failure == c.failure);
    CHECK_THAT(detail, Contains(c.says));
    CHECK(detail.find('\x1b') == std::string::npos);  // the name is the peer's choice: never shown raw
  }
  std::string good = der_of_pem(read_text("dialer-with-usages.crt.pem"));
  VerifiedPeer peer;
  AuthFailure failure = AuthFailure::kMalformed;
  std::string detail;
  CHECK(ring->check_certificate(std::span(reinterpret_cast<const uint8_t*>(good.data()), good.size()), &peer, &failure,
                                &detail));
  CHECK(peer.name == "dialer");
  // And as our own certificate: refused at load, saying why.
  std::string error;
  CHECK_FALSE(NodeCredentials::load({read_text("ca-a.pem")}, read_text("dialer-is-a-ca.crt.pem"),
                                    read_text("dialer-is-a-ca.key.pem"), &error));
  CHECK_THAT(error, Contains("cert_file: it is a CA's certificate (basicConstraints CA:TRUE)"));
}
