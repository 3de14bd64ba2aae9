// SPDX-License-Identifier: Apache-2.0
#pragma once
// Per-node identity (tunnel.auth.mode cert; docs/security.md): this node's
// X.509 certificate and private key, and the certificate authorities its
// peers' certificates must chain to. Built once from PEM text (the files
// are read by the configuration, config/key_files.h), shared read-only by
// every handshake, replaced whole by a reload.
//
// A certificate says who a node is (its subject's common name is the node
// name) and where it may be (its IP subject alternative names are the
// tunnel addresses it may hold), as a TLS certificate says which host name a
// server may answer for.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"
#include "common/auth_failure.h"

struct x509_st;
struct x509_store_st;
struct evp_pkey_st;

namespace rdmagw {

// What a verified peer certificate says.
struct VerifiedPeer {
  std::string name;       // its common name: the peer's node name
  int64_t not_after = 0;  // its end, in seconds since the epoch
};

class NodeCredentials {
 public:
  // From PEM text: each CA file may hold several certificates; the key must
  // be the certificate's. Null with *error ("cert_file: ...").
  static std::shared_ptr<const NodeCredentials> load(const std::vector<std::string>& ca_pems,
                                                     const std::string& cert_pem, const std::string& key_pem,
                                                     std::string* error);
  ~NodeCredentials();
  NodeCredentials(const NodeCredentials&) = delete;
  NodeCredentials& operator=(const NodeCredentials&) = delete;

  // Our certificate as sent to peers (DER).
  std::span<const uint8_t> certificate() const { return certificate_; }
  // Our name (the certificate's common name) and addresses (its IP SANs).
  const std::string& name() const { return name_; }
  const std::vector<IpBytes>& addresses() const { return addresses_; }
  // Seconds until our certificate expires (negative: expired), and until it
  // becomes valid (positive: not yet).
  int64_t seconds_left() const;
  int64_t seconds_until_valid() const;
  // Signs `message` with our key (SHA-256, or Ed25519's own); false if
  // OpenSSL cannot.
  bool sign(std::span<const uint8_t> message, std::vector<uint8_t>* signature) const;

  // A peer's certificate (DER) and its signature over `message`: it must be
  // a node certificate (check_certificate below), list `address` among its
  // IP SANs, name `expected_name` if that is not empty, and its key must
  // have made `signature`. The peer's name and when its certificate ends go
  // to *peer; false on refusal, with *failure and why in *detail.
  bool verify_peer(std::span<const uint8_t> certificate, const IpBytes& address, std::string_view expected_name,
                   std::span<const uint8_t> message, std::span<const uint8_t> signature, VerifiedPeer* peer,
                   AuthFailure* failure, std::string* detail) const;
  // Whether a certificate (DER) verified earlier is still good with these
  // CAs, now: it chains to one of them, is within its dates, and is a node
  // certificate (not a CA's; key usage and extended key usage, where it has
  // them, allow signing and both client and server authentication) whose
  // common name is a node name. A reload that changes the CAs, and a
  // certificate's end, are checked with it on open sessions.
  bool check_certificate(std::span<const uint8_t> certificate, VerifiedPeer* peer, AuthFailure* failure,
                         std::string* detail) const;

  // Same certificate, key and CAs (a reload that changed nothing).
  bool same_as(const NodeCredentials& other) const { return fingerprint_ == other.fingerprint_; }

 private:
  NodeCredentials() = default;
  bool check_x509(x509_st* cert, VerifiedPeer* peer, AuthFailure* failure, std::string* detail) const;
  x509_store_st* store_ = nullptr;
  x509_st* cert_ = nullptr;
  evp_pkey_st* key_ = nullptr;
  std::vector<uint8_t> certificate_;
  std::string name_;
  std::vector<IpBytes> addresses_;
  std::string fingerprint_;  // of every CA, the certificate and the key
};

// The name (common name) and IP SANs of a DER certificate, without verifying
// it; false if it does not parse.
bool certificate_identity(std::span<const uint8_t> der, std::string* name, std::vector<IpBytes>* addresses);

}  // namespace rdmagw
