// SPDX-License-Identifier: Apache-2.0
// A tunnel::Session fed arbitrary bytes as its peer's frames, through the
// unit tests' fake transport (tests/unit/fake_transport.h): the whole
// frame-handling state machine (handshake, authentication, resumption
// requests, streams, windows, keepalives) against whatever a peer may send.
//
// The first byte chooses the setting: bit 0 dialer (else acceptor), bit 1
// authentication on, bit 2 resumable, bits 3-4 how many streams the owner
// will hand out for the peer's OPENs, bit 5 (with bit 1) certificates
// instead of a key (tests/unit/certs: the peer's certificate and signature
// are parsed and checked, however they come), bit 6 tunnel.limits of 2
// streams and 3 OPENs a second (else no limits). The next byte splits the rest into
// two deliveries (a frame cut across two reads).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "common/log.h"
#include "common/secret_keys.h"
#include "fake_stream.h"
#include "fake_transport.h"
#include "proxy/tunnel/session.h"
#include "tunnel_keys.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;
using namespace rdmagw::test;

namespace {
const AuthKeyring& keyring() {
  static AuthKeyring ring = [] {
    auto keys = std::make_shared<SecretKeys>();
    keys->add(std::string(32, 'k'));
    return AuthKeyring{keys};
  }();
  return ring;
}

std::string read_text(const char* name) {
  std::ifstream in(std::string(RDMAGW_SOURCE_DIR) + "/tests/unit/certs/" + name);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const AuthKeyring& cert_keyring() {
  static AuthKeyring ring = [] {
    std::string error;
    AuthKeyring r;
    r.credentials = NodeCredentials::load({read_text("ca-a.pem")}, read_text("acceptor.crt.pem"),
                                          read_text("acceptor.key.pem"), &error);
    if (!r.credentials) __builtin_trap();  // the test certificates are missing: nothing would be fuzzed
    return r;
  }();
  return ring;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static bool quiet = (log::set_level(log::Level::kError), true);
  (void)quiet;
  uint8_t mode = data[0];
  size_t split = 2 + (size > 2 ? data[1] % (size - 1) : 0);
  if (split > size) split = size;

  SessionSettings settings;
  settings.node = "fuzz";
  TunnelConfig& keys = tunnel_keys(settings);
  keys.buffer_size = 4096;
  keys.stream_window = 16384;
  keys.session_budget = 65536;
  keys.resume_timeout_ms = (mode & 4) ? 10000 : 0;
  // Bit 6: tunnel.limits small enough for a peer's OPENs to reach them;
  // else none.
  keys.limits.streams_per_session = (mode & 64) ? 2 : 0;
  keys.limits.opens_per_second = (mode & 64) ? 3 : 0;
  if (mode & 2) settings.auth = (mode & 32) ? &cert_keyring() : &keyring();

  BufferPool pool(kBufferHeadroom + settings.tunnel->buffer_size, 64);
  EventLoop loop;
  std::string error;
  if (!loop.init(64, &error)) return 0;
  {
    FakeOwner owner;
    FakeStream streams[3];
    for (int i = 0; i < ((mode >> 3) & 3); ++i) {
      streams[i].deliver_now = 1u << 30;
      owner.give(streams[i]);
    }
    auto t = make_io<FakeTransport>(loop, pool, settings.tunnel->buffer_size);
    FakeTransport* wire = t.get();
    wire->like_a_socket = true;
    auto role = (mode & 1) ? Session::Role::kDialer : Session::Role::kAcceptor;
    IoPtr<Session> session = make_io<Session>(loop, pool, role, settings, IoPtr<Transport>(t.release()), &owner);
    session->start();
    wire->inject(Bytes(data + 2, data + split));
    loop.end_batch();
    if (wire->delivering()) wire->inject(Bytes(data + split, data + size));
    loop.end_batch();
    session->tick(loop.now());
    wire->drain_wire();
    session->close(SessionEnd::kLocalClose, "fuzz input done", CloseMode::kAbort);
    loop.end_batch();
    session.reset();
  }
  loop.shut_down();
  return 0;
}
