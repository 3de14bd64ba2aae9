// SPDX-License-Identifier: Apache-2.0
#include "common/secret_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <string_view>

namespace rdmagw {

SecretKeys::~SecretKeys() {
  // OPENSSL_cleanse, unlike memset, is not optimised away.
  for (auto& k : keys_) OPENSSL_cleanse(k.data(), k.size());
}

void SecretKeys::add(std::string key) {
  static constexpr std::string_view kLabel = "rdmagw key id v1";
  KeyId id{};
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const uint8_t*>(kLabel.data()),
       kLabel.size(), id.data(), &len);
  keys_.push_back(std::move(key));
  ids_.push_back(id);
}

bool SecretKeys::holds(const KeyId& id) const {
  return std::any_of(ids_.begin(), ids_.end(),
                     [&](const KeyId& k) { return CRYPTO_memcmp(k.data(), id.data(), id.size()) == 0; });
}

}  // namespace rdmagw
