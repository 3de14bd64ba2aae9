// SPDX-License-Identifier: Apache-2.0
#include "common/secret_keys.h"

#include <openssl/crypto.h>

namespace rdmagw {

SecretKeys::~SecretKeys() {
  // OPENSSL_cleanse, unlike memset, is not optimised away.
  for (auto& k : keys_) OPENSSL_cleanse(k.data(), k.size());
}

}  // namespace rdmagw
