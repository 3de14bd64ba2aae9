// SPDX-License-Identifier: Apache-2.0
#include "common/node_credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstring>
#include <ctime>
#include <memory>

#include "common/node_name.h"

namespace rdmagw {

namespace {

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "OpenSSL gave no reason";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

std::string common_name(X509* cert) {
  X509_NAME* subject = X509_get_subject_name(cert);
  int at = subject ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
  if (at < 0) return {};
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
  unsigned char* utf8 = nullptr;
  int n = ASN1_STRING_to_UTF8(&utf8, data);
  if (n < 0) return {};
  std::string name(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
  OPENSSL_free(utf8);
  return name;
}

std::vector<IpBytes> ip_sans(X509* cert) {
  std::vector<IpBytes> out;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (!names) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_IPADD) continue;
    const ASN1_OCTET_STRING* ip = n->d.iPAddress;
    IpBytes b{};
    if (ip->length == 4) {
      b[10] = b[11] = 0xff;
      std::memcpy(b.data() + 12, ip->data, 4);
    } else if (ip->length == 16) {
      std::memcpy(b.data(), ip->data, 16);
    } else {
      continue;
    }
    out.push_back(b);
  }
  GENERAL_NAMES_free(names);
  return out;
}

std::vector<uint8_t> der_of(X509* cert) {
  int n = i2d_X509(cert, nullptr);
  if (n <= 0) return {};
  std::vector<uint8_t> out(static_cast<size_t>(n));
  unsigned char* p = out.data();
  i2d_X509(cert, &p);
  return out;
}

// SHA-256 of `bytes`, hex: for telling whether a reload changed anything.
std::string digest(std::span<const uint8_t> bytes) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(bytes.data(), bytes.size(), md);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : md) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// Ed25519 and Ed448 sign the message itself; every other key type signs its SHA-256.
const EVP_MD* digest_for(EVP_PKEY* key) {
  int id = EVP_PKEY_get_base_id(key);
  return id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448 ? nullptr : EVP_sha256();
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr memory_bio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Empty if `cert` may stand for a node: not a CA's (basicConstraints
// CA:TRUE would let its holder issue certificates the fleet accepts, where
// a chain is allowed), and, where it carries them, key usage allowing
// digital signatures (each node signs the handshake) and extended key usage
// allowing both client and server authentication (each node dials and
// accepts). Otherwise what is wrong, and how a certificate is made right.
std::string node_certificate_problem(X509* cert) {
  uint32_t flags = X509_get_extension_flags(cert);  // also makes OpenSSL cache the extensions
  if (flags & EXFLAG_INVALID) return "its extensions do not parse";
  if (flags & EXFLAG_CA) return "it is a CA's certificate (basicConstraints CA:TRUE), not a node's";
  if ((flags & EXFLAG_KUSAGE) && !(X509_get_key_usage(cert) & KU_DIGITAL_SIGNATURE))
    return "its keyUsage does not allow digitalSignature, which the handshake needs";
  if (flags & EXFLAG_XKUSAGE) {
    uint32_t eku = X509_get_extended_key_usage(cert);
    bool any = (eku & XKU_ANYEKU) != 0;
    if (!any && !((eku & XKU_SSL_SERVER) && (eku & XKU_SSL_CLIENT)))
      return "its extendedKeyUsage does not allow both serverAuth and clientAuth (every node dials and accepts)";
  }
  return {};
}

// `t` in seconds since the epoch (0 if OpenSSL cannot read it).
int64_t unix_time(const ASN1_TIME* t) {
  struct tm tm {};
  if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

std::string_view auth_failure_name(AuthFailure f) {
  switch (f) {
    case AuthFailure::kProof:
      return "proof";
    case AuthFailure::kMalformed:
      return "malformed";
    case AuthFailure::kExpired:
      return "expired";
    case AuthFailure::kNotYetValid:
      return "not-yet-valid";
    case AuthFailure::kUnknownCa:
      return "unknown-ca";
    case AuthFailure::kWrongName:
      return "wrong-name";
    case AuthFailure::kWrongAddress:
      return "wrong-address";
    case AuthFailure::kBadSignature:
      return "bad-signature";
    case AuthFailure::kMismatch:
      return "mismatch";
    case AuthFailure::kNotANode:
      return "not-a-node";
    case AuthFailure::kCount:
      break;
  }
  return "?";
}

std::shared_ptr<const NodeCredentials> NodeCredentials::load(const std::vector<std::string>& ca_pems,
                                                             const std::string& cert_pem, const std::string& key_pem,
                                                             std::string* error) {
  std::shared_ptr<NodeCredentials> c(new NodeCredentials);
  ERR_clear_error();
  c->store_ = X509_STORE_new();
  if (!c->store_) {
    *error = "cannot make a certificate store: " + openssl_error();
    return nullptr;
  }
  std::string fingerprint;
  for (size_t i = 0; i < ca_pems.size(); ++i) {
    BioPtr bio = memory_bio(ca_pems[i]);
    int added = 0;
    while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      ++added;
      std::vector<uint8_t> der = der_of(ca);
      fingerprint += digest(der);
      bool ok = X509_STORE_add_cert(c->store_, ca) == 1;
      X509_free(ca);
      if (!ok) {
        *error = "ca_files[" + std::to_string(i) + "]: cannot add a certificate: " + openssl_error();
        return nullptr;
      }
    }
    ERR_clear_error();  // the read that ended the loop
    if (added == 0) {
      *error = "ca_files[" + std::to_string(i) + "]: no PEM certificate in it";
      return nullptr;
    }
  }
  BioPtr cert_bio = memory_bio(cert_pem);
  c->cert_ = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr);
  if (!c->cert_) {
    *error = "cert_file: no PEM certificate in it (" + openssl_error() + ")";
    return nullptr;
  }
  BioPtr key_bio = memory_bio(key_pem);
  c->key_ = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
  if (!c->key_) {
    *error = "key_file: no unencrypted PEM private key in it (" + openssl_error() + ")";
    return nullptr;
  }
  if (X509_check_private_key(c->cert_, c->key_) != 1) {
    ERR_clear_error();
    *error = "key_file: the key is not cert_file's (the certificate was issued for another key)";
    return nullptr;
  }
  c->certificate_ = der_of(c->cert_);
  c->name_ = common_name(c->cert_);
  c->addresses_ = ip_sans(c->cert_);
  if (c->name_.empty()) {
    *error = "cert_file: the certificate's subject has no common name (CN): it must be this node's name";
    return nullptr;
  }
  // Peers refuse what is not a node certificate: said at start, not by them.
  if (std::string why = node_certificate_problem(c->cert_); !why.empty()) {
    *error = "cert_file: " + why + " (docs/security.md, \"Making certificates\")";
    return nullptr;
  }
  // Our own certificate is checked as a peer will check it, so that a
  // mistake shows at start (or in --check), not as refusals by every peer.
  // All but its dates: one that expired (or is not valid yet) is used and
  // said (certificate_validity), as a running process keeps using it.
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  bool chained = ctx && X509_STORE_CTX_init(ctx, c->store_, c->cert_, nullptr) == 1;
  if (chained) X509_STORE_CTX_set_flags(ctx, X509_V_FLAG_NO_CHECK_TIME);
  chained = chained && X509_verify_cert(ctx) == 1;
  int why = ctx ? X509_STORE_CTX_get_error(ctx) : 0;
  X509_STORE_CTX_free(ctx);
  ERR_clear_error();
  if (!chained) {
    *error = std::string("cert_file: the certificate does not verify against ca_files: ") +
             X509_verify_cert_error_string(why);
    return nullptr;
  }
  fingerprint += digest(c->certificate_);
  unsigned char* key_der = nullptr;
  int key_len = i2d_PrivateKey(c->key_, &key_der);
  if (key_len > 0) {
    fingerprint += digest({key_der, static_cast<size_t>(key_len)});
    OPENSSL_clear_free(key_der, static_cast<size_t>(key_len));
  }
  c->fingerprint_ = std::move(fingerprint);
  return c;
}

NodeCredentials::~NodeCredentials() {
  X509_STORE_free(store_);
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

int64_t NodeCredentials::seconds_until_valid() const {
  int days = 0, seconds = 0;
  if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notBefore(cert_)) != 1) return 0;
  return int64_t{days} * 86400 + seconds;
}

int64_t NodeCredentials::seconds_left() const {
  int days = 0, seconds = 0;
  if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert_)) != 1) return 0;
  return int64_t{days} * 86400 + seconds;
}

bool NodeCredentials::sign(std::span<const uint8_t> message, std::vector<uint8_t>* signature) const {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t len = 0;
  bool ok = ctx && EVP_DigestSignInit(ctx, nullptr, digest_for(key_), nullptr, key_) == 1 &&
            EVP_DigestSign(ctx, nullptr, &len, message.data(), message.size()) == 1;
  if (ok) {
    signature->resize(len);
    ok = EVP_DigestSign(ctx, signature->data(), &len, message.data(), message.size()) == 1;
    signature->resize(len);
  }
  EVP_MD_CTX_free(ctx);
  ERR_clear_error();
  return ok;
}

namespace {
struct X509Free {
  void operator()(X509* c) const { X509_free(c); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

// The whole of `der` as one certificate, or null.
X509Ptr parse_der(std::span<const uint8_t> der) {
  const unsigned char* p = der.data();
  X509Ptr cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  if (cert && p != der.data() + der.size()) cert.reset();
  ERR_clear_error();
  return cert;
}

bool refuse(AuthFailure f, std::string why, AuthFailure* failure, std::string* detail) {
  *failure = f;
  *detail = std::move(why);
  return false;
}
}  // namespace

bool NodeCredentials::check_x509(X509* cert, VerifiedPeer* peer, AuthFailure* failure, std::string* detail) const {
  peer->name = common_name(cert);
  peer->not_after = unix_time(X509_get0_notAfter(cert));
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  bool chained = ctx && X509_STORE_CTX_init(ctx, store_, cert, nullptr) == 1 && X509_verify_cert(ctx) == 1;
  int why = ctx ? X509_STORE_CTX_get_error(ctx) : X509_V_ERR_OUT_OF_MEM;
  X509_STORE_CTX_free(ctx);
  ERR_clear_error();
  // The name is the peer's choice: shown only if it is a node name.
  bool printable = node_name_problem(peer->name).empty();
  std::string who = "the peer's certificate (CN " + (printable ? peer->name : std::string("not shown")) + ")";
  if (!chained) {
    std::string text = who + ": " + X509_verify_cert_error_string(why);
    if (why == X509_V_ERR_CERT_HAS_EXPIRED) return refuse(AuthFailure::kExpired, text, failure, detail);
    if (why == X509_V_ERR_CERT_NOT_YET_VALID) return refuse(AuthFailure::kNotYetValid, text, failure, detail);
    return refuse(AuthFailure::kUnknownCa, text, failure, detail);
  }
  if (std::string problem = node_certificate_problem(cert); !problem.empty())
    return refuse(AuthFailure::kNotANode, who + ": " + problem, failure, detail);
  if (peer->name.empty())
    return refuse(AuthFailure::kMalformed, who + " has no common name: it names no node", failure, detail);
  if (!printable)
    return refuse(AuthFailure::kWrongName,
                  who + ": its common name is not a node name: " + node_name_problem(peer->name), failure, detail);
  return true;
}

bool NodeCredentials::check_certificate(std::span<const uint8_t> certificate, VerifiedPeer* peer, AuthFailure* failure,
                                        std::string* detail) const {
  X509Ptr cert = parse_der(certificate);
  if (!cert) return refuse(AuthFailure::kMalformed, "the peer's certificate does not parse", failure, detail);
  return check_x509(cert.get(), peer, failure, detail);
}

bool NodeCredentials::verify_peer(std::span<const uint8_t> certificate, const IpBytes& address,
                                  std::string_view expected_name, std::span<const uint8_t> message,
                                  std::span<const uint8_t> signature, VerifiedPeer* peer, AuthFailure* failure,
                                  std::string* detail) const {
  X509Ptr cert = parse_der(certificate);
  if (!cert) return refuse(AuthFailure::kMalformed, "the peer's certificate does not parse", failure, detail);
  if (!check_x509(cert.get(), peer, failure, detail)) return false;
  std::string who = "the peer's certificate (CN " + peer->name + ")";
  if (!expected_name.empty() && peer->name != expected_name)
    return refuse(AuthFailure::kWrongName, who + " names node " + peer->name + ", not " + std::string(expected_name),
                  failure, detail);
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  bool v4 = std::memcmp(address.data(), kMapped, 12) == 0;
  const unsigned char* ip = v4 ? address.data() + 12 : address.data();
  if (X509_check_ip(cert.get(), ip, v4 ? 4 : 16, 0) != 1) {
    ERR_clear_error();
    return refuse(AuthFailure::kWrongAddress,
                  who + " does not list " + ip_bytes_text(address) + " among its IP addresses (subjectAltName)",
                  failure, detail);
  }
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  bool verified = key && md && EVP_DigestVerifyInit(md, nullptr, digest_for(key), nullptr, key) == 1 &&
                  EVP_DigestVerify(md, signature.data(), signature.size(), message.data(), message.size()) == 1;
  EVP_MD_CTX_free(md);
  ERR_clear_error();
  if (!verified)
    return refuse(AuthFailure::kBadSignature,
                  "the peer's signature over the handshake does not verify with " + who + "'s key", failure, detail);
  return true;
}

bool certificate_identity(std::span<const uint8_t> der, std::string* name, std::vector<IpBytes>* addresses) {
  const unsigned char* p = der.data();
  X509* cert = d2i_X509(nullptr, &p, static_cast<long>(der.size()));
  if (!cert) {
    ERR_clear_error();
    return false;
  }
  *name = common_name(cert);
  *addresses = ip_sans(cert);
  X509_free(cert);
  return true;
}

}  // namespace rdmagw
