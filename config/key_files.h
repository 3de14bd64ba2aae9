// SPDX-License-Identifier: Apache-2.0
#pragma once
// Pre-shared key files (tunnel.auth.key_files): what makes a file a key.
#include <cstddef>
#include <string>

namespace rdmagw {

// Shorter keys are refused: a key is meant to be drawn at random
// (docs/security.md: `head -c 32 /dev/urandom | base64`), and its length is
// what makes guessing it hopeless.
inline constexpr size_t kMinKeyBytes = 32;
// A key file larger than this is not a key (a wrong path, a certificate bundle).
inline constexpr size_t kMaxKeyFileBytes = 4096;

// Reads the key in `path`: its content with surrounding whitespace trimmed.
// Refused, with *error saying why: an unreadable or non-regular file, one
// that group or others may read or write, a larger one than
// kMaxKeyFileBytes, a key shorter than kMinKeyBytes. One exception: a
// non-root rdmagw accepts a root-owned file that only its own group may
// also read (a Kubernetes Secret mounted with fsGroup; key_files.cc).
bool read_key_file(const std::string& path, std::string* key, std::string* error);

// tunnel.auth.key_file (mode cert): a node's PEM private key, under the same
// rules as a PSK key file (private, regular, bounded); its content in *pem
// (the caller wipes it with OPENSSL_cleanse once parsed).
inline constexpr size_t kMaxPrivateKeyFileBytes = 16 * 1024;
bool read_private_key_file(const std::string& path, std::string* pem, std::string* error);
// Certificates (cert_file, ca_files) are public: regular files of at most this.
inline constexpr size_t kMaxCertificateFileBytes = 256 * 1024;

}  // namespace rdmagw
