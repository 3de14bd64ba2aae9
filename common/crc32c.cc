// SPDX-License-Identifier: Apache-2.0
#include "common/crc32c.h"

#include <array>
#include <cstring>

namespace rdmagw {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected: bit 31 is x^0

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t by_table(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

// a * b modulo the polynomial, both reflected (bit 31 is x^0).
constexpr uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;  // b * x
  }
  return product;
}

// x^(2^k) modulo the polynomial, k = 0..63.
constexpr std::array<uint32_t, 64> make_powers() {
  std::array<uint32_t, 64> powers{};
  uint32_t p = 1u << 30;  // x^1
  for (auto& power : powers) {
    power = p;
    p = multiply(p, p);
  }
  return powers;
}
constexpr std::array<uint32_t, 64> kPowers = make_powers();

// x^(8 * bytes) modulo the polynomial.
uint32_t shift_by(size_t bytes) {
  uint32_t result = 1u << 31;  // x^0
  for (unsigned k = 3; bytes != 0; bytes >>= 1, ++k)
    if (bytes & 1) result = multiply(kPowers[k], result);
  return result;
}

// The CRC of A followed by B from theirs: A's carried past B's length.
uint32_t combine(uint32_t crc_a, uint32_t crc_b, size_t length_b) {
  return multiply(shift_by(length_b), crc_a) ^ crc_b;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t by_instruction(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}

// Three CRCs at once over three thirds of the data: the instruction takes
// three cycles to give its result but can start one a cycle, so three
// independent chains run about three times as fast as one. The thirds'
// CRCs are then combined (shift_by: a few hundred operations).
__attribute__((target("sse4.2"))) uint32_t three_ways(const uint8_t* p, size_t n) {
  size_t third = n / 24 * 8;
  const uint8_t* a = p;
  const uint8_t* b = p + third;
  const uint8_t* c = p + 2 * third;
  uint64_t ca = ~0u, cb = ~0u, cc = ~0u;
  for (size_t i = 0; i < third; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, a + i, 8);
    std::memcpy(&wb, b + i, 8);
    std::memcpy(&wc, c + i, 8);
    ca = __builtin_ia32_crc32di(ca, wa);
    cb = __builtin_ia32_crc32di(cb, wb);
    cc = __builtin_ia32_crc32di(cc, wc);
  }
  size_t rest = n - 3 * third;
  uint32_t last = ~by_instruction(static_cast<uint32_t>(cc), c + third, rest);
  uint32_t ab = combine(~static_cast<uint32_t>(ca), ~static_cast<uint32_t>(cb), third);
  return combine(ab, last, third + rest);
}

bool has_instruction() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (has_instruction()) return size >= 4096 ? three_ways(p, size) : ~by_instruction(~0u, p, size);
#endif
  return ~by_table(~0u, p, size);
}

}  // namespace rdmagw
