// Key schedule of sealed pieces: from the secret two ranks share through their
// mutual-TLS session to one AES-256-GCM key and nonce salt per direction,
// purpose and group generation.
//
//   secret  32 bytes, TlsChannel::export_secret("EXPORTER-tessera-seal-v1", {})
//           on both ends of the authenticated TLS session of a pair of ranks
//   okm     HKDF-SHA256 (RFC 5869) of 44 bytes:
//             ikm  = secret
//             salt = "tessera seal v1" (15 bytes, no terminator)
//             info = 17 bytes, little-endian:
//                      offset  size  field
//                           0     1  purpose     KeyPurpose (1 data, 2 hello)
//                           1     4  from_rank   the rank that seals
//                           5     4  to_rank     the rank that opens
//                           9     8  generation  group generation
//   key     okm bytes 0..31
//   salt    okm bytes 32..43
//
// Nonce of a piece (96 bits) = salt XOR (counter u64 LE in bytes 0..7 |
// piece u32 LE in bytes 8..11). Each direction, purpose and generation has its
// own key, so a nonce repeats only if one sealer seals the same (counter,
// piece) twice, which Sealer refuses (piece.h).
//
// Pure functions; safe from any thread. Derived keys are values that zero
// themselves when destroyed: the caller owns them and should not keep them
// longer than the generation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tessera::seal {

inline constexpr size_t kSecretBytes = 32;
inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kSaltBytes = 12;
inline constexpr size_t kTagBytes = 16;

// TlsChannel::export_secret("EXPORTER-tessera-seal-v1", {}) on both ends.
using Secret = std::array<uint8_t, kSecretBytes>;

// The AES-256-GCM key and nonce salt of one direction (from_rank -> to_rank).
// Zeroed when destroyed (OPENSSL_cleanse), so no copy outlives its use in memory.
struct DirectionKey {
  std::array<uint8_t, kKeyBytes> key;
  std::array<uint8_t, kSaltBytes> salt;
  ~DirectionKey();
};

// Separates the keys of piece data from those of connection hellos (hello.h).
enum class KeyPurpose : uint8_t { kData = 1, kHello = 2 };

DirectionKey derive_key(const Secret& secret, KeyPurpose purpose, uint32_t from_rank, uint32_t to_rank,
                        uint64_t generation);

// RFC 5869 HKDF-SHA256, extract then expand, through OpenSSL's EVP_KDF "HKDF".
// An empty salt means HashLen zero bytes (RFC 5869 section 2.2). out.size() must
// be 1..255*32 bytes (TS_CHECK).
void hkdf_sha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt, std::span<const uint8_t> info,
                 std::span<uint8_t> out);

// 96-bit nonce = salt XOR (counter u64 LE in bytes 0..7 | piece u32 LE in bytes 8..11).
std::array<uint8_t, kSaltBytes> piece_nonce(const DirectionKey& key, uint64_t counter, uint32_t piece);
// The same from the salt alone (for holders that keep no key bytes).
std::array<uint8_t, kSaltBytes> piece_nonce(std::span<const uint8_t, kSaltBytes> salt, uint64_t counter,
                                            uint32_t piece);

}  // namespace tessera::seal
