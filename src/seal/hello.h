// Connection hello: the first 40 bytes a rank sends on a new plain-TCP data
// connection. They bind the connection to the authenticated TLS session of the
// same pair of ranks: only a holder of that session's exported secret can make
// a hello that opens, so a stranger cannot open a data connection in a rank's
// name (data pieces are sealed under keys from the same secret anyway; the hello
// also makes plain mode, with unsealed pieces, safe to accept).
//
// Layout, every integer little-endian:
//
//   offset  size  field
//        0     3  magic       "TSH" (0x54 0x53 0x48)
//        3     1  layout      kHelloLayout (1)
//        4     4  flags       bit 0: plain mode (pieces unsealed); other bits zero
//        8     4  sender      rank that opened the connection
//       12     4  receiver    rank it connects to
//       16     8  generation  group generation
//       24    16  tag         AES-256-GCM tag over an empty plaintext with
//                             associated data = bytes 0..23,
//                             key   = derive_key(secret, kHello, sender, receiver, generation),
//                             nonce = piece_nonce(key, 0, 0)
//       40        (end)
//
// The receiver reads 40 bytes, calls peek_hello to learn which peer session to
// check against (the fields are not trusted yet), states what it expects, and
// calls open_hello. A hello is deterministic: resending the same hello on a
// reconnect reuses the nonce on the same input and leaks nothing, but a rank must
// never send two DIFFERENT hellos (say, other flags) for one (sender, receiver,
// generation), which would reuse a GCM nonce on different data.
//
// Pure functions; safe from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"
#include "seal/key_schedule.h"

namespace tessera::seal {

inline constexpr size_t kHelloBytes = 40;
inline constexpr uint8_t kHelloLayout = 1;
inline constexpr uint8_t kHelloMagic[3] = {'T', 'S', 'H'};
inline constexpr uint32_t kHelloFlagPlain = 1;
inline constexpr uint32_t kHelloKnownFlags = kHelloFlagPlain;

struct Hello {
  uint32_t sender = 0;
  uint32_t receiver = 0;
  uint64_t generation = 0;
  bool plain = false;  // pieces on this connection are unsealed
};

std::array<uint8_t, kHelloBytes> seal_hello(const Secret& secret, const Hello& hello);

// Parses the cleartext fields WITHOUT trusting them (to find which session to
// check against). Checks the size, magic, layout and flags (kInvalidInput).
Result<Hello> peek_hello(std::span<const uint8_t> wire);

// peek_hello's checks, then every field must equal `expected` (the error names
// the field), then the tag must verify under the key of `expected`. kInvalidInput.
Status open_hello(const Secret& secret, const Hello& expected, std::span<const uint8_t> wire);

}  // namespace tessera::seal
