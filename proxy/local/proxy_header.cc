// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/proxy_header.h"

#include "proxy/local/stream_origin.h"

namespace rdmagw::local {

namespace {

constexpr char kSignature[12] = {'\r', '\n', '\r', '\n', '\0', '\r', '\n', 'Q', 'U', 'I', 'T', '\n'};
constexpr uint8_t kVersion2Local = 0x20;
constexpr uint8_t kVersion2Proxy = 0x21;
constexpr uint8_t kTcpOverIpv4 = 0x11;
constexpr uint8_t kTcpOverIpv6 = 0x21;
constexpr uint8_t kUnspecified = 0x00;

void put_u16_network(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v & 0xff));
}

}  // namespace

std::string proxy_v2_header(const tunnel::StreamOrigin* origin, const sockaddr* target, socklen_t target_length) {
  std::string out(kSignature, sizeof(kSignature));
  const tunnel::OriginAddress* client = origin && origin->client.family != 0 ? &origin->client : nullptr;
  if (!client) {
    out.push_back(static_cast<char>(kVersion2Local));
    out.push_back(static_cast<char>(kUnspecified));
    put_u16_network(&out, 0);
    return out;
  }
  tunnel::OriginAddress destination;
  tunnel::OriginAddress at_target = target ? origin_address(target, target_length) : tunnel::OriginAddress{};
  if (origin->destination.family == client->family)
    destination = origin->destination;
  else if (at_target.family == client->family)
    destination = at_target;
  else
    destination.family = client->family;  // the unspecified address, port 0
  const size_t address_bytes = client->family == 4 ? 4 : 16;
  out.push_back(static_cast<char>(kVersion2Proxy));
  out.push_back(static_cast<char>(client->family == 4 ? kTcpOverIpv4 : kTcpOverIpv6));
  put_u16_network(&out, static_cast<uint16_t>(2 * address_bytes + 4));
  out.append(reinterpret_cast<const char*>(client->address.data()), address_bytes);
  out.append(reinterpret_cast<const char*>(destination.address.data()), address_bytes);
  put_u16_network(&out, client->port);
  put_u16_network(&out, destination.port);
  return out;
}

}  // namespace rdmagw::local
