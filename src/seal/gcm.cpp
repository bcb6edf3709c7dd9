#include "seal/gcm.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/check.h"

namespace tessera::seal {

namespace {

// EVP lengths are int: feed larger spans in chunks.
constexpr size_t kMaxChunk = size_t{1} << 30;

// Feeds `in` to EVP_CipherUpdate (out == nullptr: associated data).
bool update(EVP_CIPHER_CTX* ctx, std::span<const uint8_t> in, uint8_t* out) {
  size_t done = 0;
  while (done < in.size()) {
    const size_t n = std::min(in.size() - done, kMaxChunk);
    int written = 0;
    if (EVP_CipherUpdate(ctx, out ? out + done : nullptr, &written, in.data() + done, static_cast<int>(n)) != 1)
      return false;
    if (out != nullptr && static_cast<size_t>(written) != n) return false;  // GCM is a stream mode
    done += n;
  }
  return true;
}

}  // namespace

GcmCipher::GcmCipher(const std::array<uint8_t, kKeyBytes>& key, Mode mode) : mode_(mode), ctx_(EVP_CIPHER_CTX_new()) {
  TS_CHECK(ctx_ != nullptr, "EVP_CIPHER_CTX_new failed");
  const int enc = mode == Mode::kEncrypt ? 1 : 0;
  // The default GCM IV length is 12 bytes, the size of our nonces.
  TS_CHECK(EVP_CipherInit_ex2(ctx_.get(), EVP_aes_256_gcm(), key.data(), nullptr, enc, nullptr) == 1,
           "AES-256-GCM key setup failed");
  TS_CHECK(EVP_CIPHER_CTX_get_iv_length(ctx_.get()) == static_cast<int>(kSaltBytes));
}

Status GcmCipher::encrypt(const std::array<uint8_t, kSaltBytes>& nonce, std::span<const uint8_t> ad,
                          std::span<const uint8_t> plain, std::span<uint8_t> cipher,
                          std::span<uint8_t, kTagBytes> tag) {
  TS_CHECK(mode_ == Mode::kEncrypt);
  TS_CHECK_EQ(cipher.size(), plain.size());
  EVP_CIPHER_CTX* ctx = ctx_.get();
  int final_bytes = 0;
  // Key nullptr: only the nonce changes; the key schedule stays.
  if (EVP_CipherInit_ex2(ctx, nullptr, nullptr, nonce.data(), 1, nullptr) != 1 || !update(ctx, ad, nullptr) ||
      !update(ctx, plain, cipher.data()) || EVP_CipherFinal_ex(ctx, cipher.data() + cipher.size(), &final_bytes) != 1 ||
      final_bytes != 0 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), tag.data()) != 1) {
    return Status::internal("AES-256-GCM encryption failed in OpenSSL");
  }
  return {};
}

bool GcmCipher::decrypt(const std::array<uint8_t, kSaltBytes>& nonce, std::span<const uint8_t> ad,
                        std::span<const uint8_t> cipher, std::span<const uint8_t, kTagBytes> tag,
                        std::span<uint8_t> plain) {
  TS_CHECK(mode_ == Mode::kDecrypt);
  TS_CHECK_EQ(cipher.size(), plain.size());
  EVP_CIPHER_CTX* ctx = ctx_.get();
  std::array<uint8_t, kTagBytes> expected_tag;
  std::copy(tag.begin(), tag.end(), expected_tag.begin());
  int final_bytes = 0;
  const bool ok =
      EVP_CipherInit_ex2(ctx, nullptr, nullptr, nonce.data(), 0, nullptr) == 1 && update(ctx, ad, nullptr) &&
      update(ctx, cipher, plain.data()) &&
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), expected_tag.data()) == 1 &&
      EVP_CipherFinal_ex(ctx, plain.data() + plain.size(), &final_bytes) == 1 && final_bytes == 0;
  if (!ok && !plain.empty()) OPENSSL_cleanse(plain.data(), plain.size());
  return ok;
}

}  // namespace tessera::seal
