// SPDX-License-Identifier: Apache-2.0
#pragma once
// Why a tunnel handshake's authentication failed (docs/security.md).
#include <cstdint>
#include <string_view>

namespace rdmagw {

// Why a peer's certificate or proof was refused; the label of
// rdmagw_auth_failures_total{reason} (auth_failure_name()).
enum class AuthFailure : uint8_t {
  kProof,         // psk: a proof under none of our keys
  kMalformed,     // not a certificate, or a handshake message out of shape
  kExpired,       // the certificate's notAfter has passed
  kNotYetValid,   // its notBefore has not come
  kUnknownCa,     // it does not chain to one of ca_files (or its chain is otherwise invalid)
  kWrongName,     // a named peer whose certificate names another node
  kWrongAddress,  // an address the certificate does not list, or not the one dialed
  kBadSignature,  // the signature over the handshake does not verify with the certificate's key
  kMismatch,      // the two sides' settings disagree (auth mode, encryption, an older rdmagw)
  kNotANode,      // a CA's certificate, or key usages that do not allow a node's handshake
  kCount
};
std::string_view auth_failure_name(AuthFailure f);

}  // namespace rdmagw
