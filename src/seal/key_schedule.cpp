#include "seal/key_schedule.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <algorithm>
#include <memory>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "wire/byte_io.h"

namespace tessera::seal {

namespace {

constexpr std::string_view kHkdfSalt = "tessera seal v1";
constexpr size_t kHkdfMaxOutput = 255 * 32;  // RFC 5869: L <= 255 * HashLen

struct KdfDeleter {
  void operator()(EVP_KDF* kdf) const { EVP_KDF_free(kdf); }
};
struct KdfCtxDeleter {
  void operator()(EVP_KDF_CTX* ctx) const { EVP_KDF_CTX_free(ctx); }
};

// OSSL_PARAM takes non-const pointers even for inputs it only reads.
OSSL_PARAM octets(const char* name, std::span<const uint8_t> bytes) {
  return OSSL_PARAM_construct_octet_string(name, const_cast<uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

void hkdf_sha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt, std::span<const uint8_t> info,
                 std::span<uint8_t> out) {
  TS_CHECK(!out.empty() && out.size() <= kHkdfMaxOutput, "HKDF output of ", out.size(), " bytes");
  const std::unique_ptr<EVP_KDF, KdfDeleter> kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr));
  TS_CHECK(kdf != nullptr, "OpenSSL has no HKDF");
  const std::unique_ptr<EVP_KDF_CTX, KdfCtxDeleter> ctx(EVP_KDF_CTX_new(kdf.get()));
  TS_CHECK(ctx != nullptr, "EVP_KDF_CTX_new failed");

  char digest[] = "SHA256";
  std::vector<OSSL_PARAM> params;
  params.push_back(OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0));
  params.push_back(octets(OSSL_KDF_PARAM_KEY, ikm));
  // Without a salt parameter OpenSSL uses HashLen zero bytes, as RFC 5869 says.
  if (!salt.empty()) params.push_back(octets(OSSL_KDF_PARAM_SALT, salt));
  if (!info.empty()) params.push_back(octets(OSSL_KDF_PARAM_INFO, info));
  params.push_back(OSSL_PARAM_construct_end());
  TS_CHECK(EVP_KDF_derive(ctx.get(), out.data(), out.size(), params.data()) == 1, "HKDF-SHA256 failed");
}

DirectionKey::~DirectionKey() {
  OPENSSL_cleanse(key.data(), key.size());
  OPENSSL_cleanse(salt.data(), salt.size());
}

DirectionKey derive_key(const Secret& secret, KeyPurpose purpose, uint32_t from_rank, uint32_t to_rank,
                        uint64_t generation) {
  std::vector<uint8_t> info;
  info.reserve(17);
  wire::put_u8(info, static_cast<uint8_t>(purpose));
  wire::put_u32(info, from_rank);
  wire::put_u32(info, to_rank);
  wire::put_u64(info, generation);

  std::array<uint8_t, kKeyBytes + kSaltBytes> okm;
  const std::span<const uint8_t> salt(reinterpret_cast<const uint8_t*>(kHkdfSalt.data()), kHkdfSalt.size());
  hkdf_sha256(secret, salt, info, okm);
  DirectionKey key;
  std::copy(okm.begin(), okm.begin() + kKeyBytes, key.key.begin());
  std::copy(okm.begin() + kKeyBytes, okm.end(), key.salt.begin());
  OPENSSL_cleanse(okm.data(), okm.size());
  return key;
}

std::array<uint8_t, kSaltBytes> piece_nonce(const DirectionKey& key, uint64_t counter, uint32_t piece) {
  return piece_nonce(key.salt, counter, piece);
}

std::array<uint8_t, kSaltBytes> piece_nonce(std::span<const uint8_t, kSaltBytes> salt, uint64_t counter,
                                            uint32_t piece) {
  std::array<uint8_t, kSaltBytes> nonce;
  std::copy(salt.begin(), salt.end(), nonce.begin());
  for (size_t i = 0; i < 8; ++i) nonce[i] ^= static_cast<uint8_t>(counter >> (8 * i));
  for (size_t i = 0; i < 4; ++i) nonce[8 + i] ^= static_cast<uint8_t>(piece >> (8 * i));
  return nonce;
}

}  // namespace tessera::seal
