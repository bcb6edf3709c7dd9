// AES-256-GCM through OpenSSL's EVP interface, keyed once and reused: only the
// nonce is set per message, which keeps the AES key schedule out of the
// per-piece cost. The building block of Sealer/Opener (piece.h) and of the
// connection hello (hello.h); other code should use those.
//
// A GcmCipher is a resource type (owns an EVP_CIPHER_CTX): movable, not
// copyable, not thread-safe. Different objects may be used from different
// threads at once.
#pragma once

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "seal/key_schedule.h"

namespace tessera::seal {

class GcmCipher {
 public:
  enum class Mode { kEncrypt, kDecrypt };

  GcmCipher(const std::array<uint8_t, kKeyBytes>& key, Mode mode);

  // cipher.size() == plain.size(); the spans must not overlap. An error is
  // kInternal (OpenSSL failed), never the caller's input.
  Status encrypt(const std::array<uint8_t, kSaltBytes>& nonce, std::span<const uint8_t> ad,
                 std::span<const uint8_t> plain, std::span<uint8_t> cipher, std::span<uint8_t, kTagBytes> tag);

  // plain.size() == cipher.size(); the spans must not overlap. Returns false
  // when the tag does not verify (or OpenSSL fails); plain is then all zeros.
  bool decrypt(const std::array<uint8_t, kSaltBytes>& nonce, std::span<const uint8_t> ad,
               std::span<const uint8_t> cipher, std::span<const uint8_t, kTagBytes> tag, std::span<uint8_t> plain);

 private:
  struct CtxDeleter {
    void operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }
  };
  Mode mode_;
  std::unique_ptr<EVP_CIPHER_CTX, CtxDeleter> ctx_;
};

}  // namespace tessera::seal
