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

  // A peer's certificate (DER) and its signature over `message`: it must
  // chain to one of our CAs and be valid now, list `address` among its IP
  // SANs, name `expected_name` if that is not empty, and its key must have
  // made `signature`. The peer's name (common name) goes to *name; false
  // on refusal, with *failure and why in *detail.
  bool verify_peer(std::span<const uint8_t> certificate, const IpBytes& address, std::string_view expected_name,
                   std::span<const uint8_t> message, std::span<const uint8_t> signature, std::string* name,
                   AuthFailure* failure, std::string* detail) const;

  // Same certificate, key and CAs (a reload that changed nothing).
  bool same_as(const NodeCredentials& other) const { return fingerprint_ == other.fingerprint_; }

 private:
  NodeCredentials() = default;
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
