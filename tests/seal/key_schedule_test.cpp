// Tests of the key schedule (src/seal/key_schedule.h): HKDF-SHA256 against RFC
// 5869, derive_key against an independent HKDF (Python hmac/hashlib), the
// separation of keys by direction, purpose, generation and secret, the zeroing
// of a destroyed key, and the nonce layout.
#include "seal/key_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <new>
#include <vector>

#include "seal_test_util.h"

namespace tessera::seal {
namespace {

using testing::from_hex;
using testing::test_secret;

std::vector<uint8_t> hkdf(const std::vector<uint8_t>& ikm, const std::vector<uint8_t>& salt,
                          const std::vector<uint8_t>& info, size_t n) {
  std::vector<uint8_t> out(n);
  hkdf_sha256(ikm, salt, info, out);
  return out;
}

TEST(KeyScheduleTest, HkdfMatchesRfc5869TestCase1) {
  const std::vector<uint8_t> ikm(22, 0x0b);
  const std::vector<uint8_t> salt = from_hex("000102030405060708090a0b0c");
  const std::vector<uint8_t> info = from_hex("f0f1f2f3f4f5f6f7f8f9");
  EXPECT_EQ(hkdf(ikm, salt, info, 42),
            from_hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"));
}

TEST(KeyScheduleTest, HkdfMatchesRfc5869TestCase3EmptySaltAndInfo) {
  const std::vector<uint8_t> ikm(22, 0x0b);
  EXPECT_EQ(hkdf(ikm, {}, {}, 42),
            from_hex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"));
}

// Known answer from an independent HKDF (Python hmac + hashlib) over
// info = struct.pack('<BIIQ', 1, 1, 0, 3): pins the salt string and info layout.
TEST(KeyScheduleTest, DeriveKeyKnownAnswer) {
  const DirectionKey key = derive_key(test_secret(), KeyPurpose::kData, 1, 0, 3);
  EXPECT_EQ(std::vector<uint8_t>(key.key.begin(), key.key.end()),
            from_hex("5ff5352c3bff4dfb0885b738550646d233dec6a786b3ceabbdc22f5078efc0e4"));
  EXPECT_EQ(std::vector<uint8_t>(key.salt.begin(), key.salt.end()), from_hex("2ea3536344b71710b5ab0172"));
}

bool same(const DirectionKey& a, const DirectionKey& b) { return a.key == b.key && a.salt == b.salt; }
bool disjoint(const DirectionKey& a, const DirectionKey& b) { return a.key != b.key && a.salt != b.salt; }

TEST(KeyScheduleTest, DeriveKeyIsDeterministic) {
  EXPECT_TRUE(same(derive_key(test_secret(), KeyPurpose::kData, 1, 0, 3),
                   derive_key(test_secret(), KeyPurpose::kData, 1, 0, 3)));
}

TEST(KeyScheduleTest, DeriveKeySeparatesDirectionPurposeGenerationAndSecret) {
  const DirectionKey base = derive_key(test_secret(), KeyPurpose::kData, 1, 0, 3);
  EXPECT_TRUE(disjoint(base, derive_key(test_secret(), KeyPurpose::kData, 0, 1, 3)));   // other direction
  EXPECT_TRUE(disjoint(base, derive_key(test_secret(), KeyPurpose::kHello, 1, 0, 3)));  // other purpose
  EXPECT_TRUE(disjoint(base, derive_key(test_secret(), KeyPurpose::kData, 1, 0, 4)));   // next generation
  EXPECT_TRUE(disjoint(base, derive_key(test_secret(), KeyPurpose::kData, 1, 2, 3)));   // other receiver
  EXPECT_TRUE(disjoint(base, derive_key(test_secret(), KeyPurpose::kData, 2, 0, 3)));   // other sender
  EXPECT_TRUE(disjoint(base, derive_key(test_secret(1), KeyPurpose::kData, 1, 0, 3)));  // other session
  // Fields must not run into each other: a high generation byte is not a rank.
  EXPECT_TRUE(disjoint(derive_key(test_secret(), KeyPurpose::kData, 0, 0, uint64_t{1} << 56),
                       derive_key(test_secret(), KeyPurpose::kData, 0, 1, 0)));
}

// A key leaves nothing behind: its storage is all zeros once it is destroyed
// (fails without ~DirectionKey's cleanse; checked).
TEST(KeyScheduleTest, DirectionKeyIsZeroedWhenDestroyed) {
  alignas(DirectionKey) std::array<unsigned char, sizeof(DirectionKey)> storage{};
  auto* key = new (storage.data()) DirectionKey(derive_key(test_secret(), KeyPurpose::kData, 1, 0, 3));
  EXPECT_NE(std::count(storage.begin(), storage.end(), 0), static_cast<std::ptrdiff_t>(storage.size()));
  key->~DirectionKey();
  EXPECT_EQ(std::count(storage.begin(), storage.end(), 0), static_cast<std::ptrdiff_t>(storage.size()));
}

TEST(KeyScheduleTest, NonceIsSaltXorCounterAndPiece) {
  DirectionKey key{};
  std::array<uint8_t, kSaltBytes> expected = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x0c, 0x0b, 0x0a, 0x09};
  EXPECT_EQ(piece_nonce(key, 0x0102030405060708ULL, 0x090a0b0cU), expected);

  for (size_t i = 0; i < kSaltBytes; ++i) key.salt[i] = static_cast<uint8_t>(0xf0 + i);
  for (size_t i = 0; i < kSaltBytes; ++i) expected[i] ^= key.salt[i];
  EXPECT_EQ(piece_nonce(key, 0x0102030405060708ULL, 0x090a0b0cU), expected);
  EXPECT_EQ(piece_nonce(key, 0, 0), key.salt);
  EXPECT_EQ(piece_nonce(key.salt, 0x0102030405060708ULL, 0x090a0b0cU), expected);
  // Counter and piece occupy different bytes: (1, 0) and (0, 1) differ.
  EXPECT_NE(piece_nonce(key, 1, 0), piece_nonce(key, 0, 1));
  EXPECT_NE(piece_nonce(key, uint64_t{1} << 32, 0), piece_nonce(key, 0, 1));
}

}  // namespace
}  // namespace tessera::seal
