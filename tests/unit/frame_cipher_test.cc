// SPDX-License-Identifier: Apache-2.0
// tunnel::FrameCipher and derive_frame_keys: records open only in order,
// once, unaltered, under the other direction's key of the same handshake,
// whether they are encrypted or only authenticated.
#include "proxy/tunnel/frame_cipher.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

using namespace rdmagw::tunnel;

namespace {
using Bytes = std::vector<uint8_t>;

struct Link {
  FrameKeys keys;
  std::unique_ptr<FrameCipher> sealer, opener;
  Protection protection;
  explicit Link(Protection p = Protection::kEncrypt) : protection(p) {
    Nonce dn{}, an{};
    dn.fill(1);
    an.fill(2);
    const std::string psk(32, 'k');
    REQUIRE(derive_frame_keys({reinterpret_cast<const uint8_t*>(psk.data()), psk.size()}, dn, an, p, &keys));
    std::string error;
    sealer = FrameCipher::create(keys.dialer_to_acceptor, FrameCipher::Use::kSeal, p, &error);
    opener = FrameCipher::create(keys.dialer_to_acceptor, FrameCipher::Use::kOpen, p, &error);
    REQUIRE(sealer);
    REQUIRE(opener);
  }
  Bytes seal(const std::string& text, const Bytes& aad = {}) {
    Bytes out(text.size() + kCipherTagSize);
    REQUIRE(sealer->seal({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, aad, out.data()));
    return out;
  }
  bool open(Bytes sealed, std::string* text, const Bytes& aad = {}) {
    Bytes out(sealed.size());
    if (!opener->open(sealed, aad, out.data())) return false;
    *text = std::string(out.begin(), out.begin() + static_cast<long>(sealed.size() - kCipherTagSize));
    return true;
  }
};
}  // namespace

TEST_CASE("frame cipher: records open in order, and hide what they carry") {
  Link l;
  Bytes a = l.seal("first record", {9, 9, 9, 9});
  Bytes b = l.seal("second");
  CHECK(std::string(a.begin(), a.end()).find("first") == std::string::npos);
  std::string text;
  REQUIRE(l.open(a, &text, {9, 9, 9, 9}));
  CHECK(text == "first record");
  REQUIRE(l.open(b, &text));
  CHECK(text == "second");
  // The same bytes sealed again differ: each record has its own nonce.
  CHECK(l.seal("second") != b);
}

TEST_CASE("frame cipher: authenticated only, a record carries its bytes as they are, and opens only unaltered") {
  Link l(Protection::kAuthenticate);
  Bytes a = l.seal("first record", {9, 9, 9, 9});
  CHECK(std::string(a.begin(), a.begin() + 12) == "first record");
  std::string text;
  REQUIRE(l.open(a, &text, {9, 9, 9, 9}));
  CHECK(text == "first record");
  Bytes b = l.seal("second");
  b[0] ^= 1;  // the bytes are in clear: a changed one must not pass
  CHECK_FALSE(l.open(b, &text));
}

TEST_CASE("frame cipher: a gathered record opens like a contiguous one, in place too") {
  auto protection = GENERATE(Protection::kEncrypt, Protection::kAuthenticate);
  Link l(protection);
  std::string p1 = "gathered ", p2 = "from two pieces";
  iovec parts[2] = {{p1.data(), p1.size()}, {p2.data(), p2.size()}};
  Bytes sealed(p1.size() + p2.size() + kCipherTagSize);
  REQUIRE(l.sealer->seal(std::span<const iovec>(parts, 2), {}, sealed.data()));
  REQUIRE(l.opener->open(sealed, {}, sealed.data()));  // in place
  CHECK(std::string(sealed.begin(), sealed.begin() + static_cast<long>(p1.size() + p2.size())) == p1 + p2);
}

TEST_CASE("frame cipher: altered, replayed, reordered or mislabelled records do not open") {
  auto protection = GENERATE(Protection::kEncrypt, Protection::kAuthenticate);
  std::string text;
  SECTION("a flipped bit") {
    Link l(protection);
    Bytes a = l.seal("payload");
    a[2] ^= 1;
    CHECK_FALSE(l.open(a, &text));
  }
  SECTION("a flipped tag bit") {
    Link l(protection);
    Bytes a = l.seal("payload");
    a.back() ^= 0x80;
    CHECK_FALSE(l.open(a, &text));
  }
  SECTION("a replay") {
    Link l(protection);
    Bytes a = l.seal("once");
    REQUIRE(l.open(a, &text));
    CHECK_FALSE(l.open(a, &text));
  }
  SECTION("out of order") {
    Link l(protection);
    Bytes a = l.seal("one");
    Bytes b = l.seal("two");
    CHECK_FALSE(l.open(b, &text));
    (void)a;
  }
  SECTION("other authenticated data (a record's length)") {
    Link l(protection);
    Bytes a = l.seal("payload", {0, 0, 0, 23});
    CHECK_FALSE(l.open(a, &text, {0, 0, 0, 24}));
  }
  SECTION("the other direction's key") {
    Link l(protection);
    std::string error;
    auto wrong = FrameCipher::create(l.keys.acceptor_to_dialer, FrameCipher::Use::kOpen, protection, &error);
    Bytes a = l.seal("payload");
    Bytes out(a.size());
    CHECK_FALSE(wrong->open(a, {}, out.data()));
  }
  SECTION("too short to hold a tag") {
    Link l(protection);
    Bytes out(8);
    CHECK_FALSE(l.opener->open(Bytes(8, 0), {}, out.data()));
  }
}

TEST_CASE("frame keys: both directions differ, and depend on the key and both nonces") {
  Nonce dn{}, an{};
  dn.fill(1);
  an.fill(2);
  const std::string k1(32, 'a'), k2(32, 'b');
  auto span = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  constexpr Protection kE = Protection::kEncrypt;
  FrameKeys a, b, c, d, e;
  REQUIRE(derive_frame_keys(span(k1), dn, an, kE, &a));
  REQUIRE(derive_frame_keys(span(k1), dn, an, kE, &b));
  CHECK(a.dialer_to_acceptor == b.dialer_to_acceptor);  // both ends derive the same
  CHECK(a.dialer_to_acceptor != a.acceptor_to_dialer);
  REQUIRE(derive_frame_keys(span(k1), dn, an, Protection::kAuthenticate, &e));
  CHECK(e.dialer_to_acceptor != a.dialer_to_acceptor);  // never the same keys for both protections
  REQUIRE(derive_frame_keys(span(k2), dn, an, kE, &c));
  CHECK(c.dialer_to_acceptor != a.dialer_to_acceptor);
  an[31] ^= 1;
  REQUIRE(derive_frame_keys(span(k1), dn, an, kE, &d));
  CHECK(d.dialer_to_acceptor != a.dialer_to_acceptor);
}
