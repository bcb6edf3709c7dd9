// Sealed pieces: how a tensor message that two ranks exchange over plain TCP is
// cut into pieces, and each piece authenticated-encrypted with AES-256-GCM
// under the direction's key (key_schedule.h).
//
// A message of element_count elements of dtype (total_bytes = element_count *
// dtype_size) is cut into piece_count(total_bytes, piece_bytes) pieces of
// piece_bytes bytes, the last one shorter; an empty message is one empty piece.
// The receiver derives the count and every length from what it EXPECTS (its
// PieceContext), never from the wire, and reads exactly piece_wire_bytes(...)
// bytes per piece.
//
// One piece on the wire, every integer little-endian:
//
//   offset  size  field
//        0     3  magic         "TSP" (0x54 0x53 0x50)
//        3     1  layout        kPieceLayout (1)
//        4     1  op            Op
//        5     1  dtype         DType (0 f32, 1 f16, 2 bf16, 3 i64, 4 i32, 5 u8)
//        6     2  reserved      zero
//        8     8  generation    group generation (selects the key)
//       16     4  sender        rank that sealed the piece
//       20     4  receiver      rank that opens it
//       24     8  counter       message counter of the direction
//       32     4  piece_index   0 .. piece_count-1
//       36     4  piece_count   pieces of the message
//       40     n  payload       ciphertext when sealed (plaintext in plain mode),
//                               n = piece_payload_bytes(total_bytes, piece_bytes, piece_index)
//     40+n    16  tag           AES-256-GCM tag; sealed pieces only
//
// Nonce = direction salt XOR (counter | piece_index) (piece_nonce). The
// associated data (associated_data) binds the protocol version, the layout and
// every PieceContext field, including those the header does not carry
// (piece_bytes, element_count):
//
//   offset  size  field
//        0     2  protocol major   wire::kProtocolMajor
//        2     2  protocol minor   wire::kProtocolMinor
//        4     1  layout           kPieceLayout
//        5     1  op
//        6     1  dtype
//        7     1  reserved         zero
//        8     8  generation
//       16     4  sender
//       20     4  receiver
//       24     8  counter
//       32     4  piece_index
//       36     4  piece_count
//       40     4  piece_bytes
//       44     8  element_count
//       52        (end)
//
// Receiver checks, in order (Opener::open): wire length, magic, layout, op,
// dtype, reserved, generation, sender, receiver, counter, piece_index,
// piece_count (each a kInvalidInput naming the field and the likely cause);
// then the tag over the associated data of the EXPECTED context.
//
// Free functions are pure and safe from any thread. Sealer and Opener are
// resource types (each owns an EVP_CIPHER_CTX): movable, not copyable, not
// thread-safe; use one per direction from one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "seal/gcm.h"
#include "seal/key_schedule.h"

namespace tessera::seal {

inline constexpr uint8_t kPieceLayout = 1;
inline constexpr uint8_t kPieceMagic[3] = {'T', 'S', 'P'};

enum class Op : uint8_t { kSend = 1, kAllSum = 2, kReduceScatter = 3, kAllGather = 4, kBroadcast = 5, kActivation = 6 };
// Adding an op changes what receivers accept: bump kPieceLayout or the protocol
// minor version, then update this.
inline constexpr uint8_t kLastOp = 6;
static_assert(static_cast<uint8_t>(Op::kActivation) == kLastOp);

// "send", "all_sum", "reduce_scatter", "all_gather", "broadcast", "activation";
// "unknown" for a value outside the enum.
std::string_view op_name(Op op);

// Everything the associated data binds: one piece of one message.
struct PieceContext {
  Op op = Op::kSend;
  uint64_t generation = 0;
  uint32_t sender = 0;
  uint32_t receiver = 0;
  uint64_t counter = 0;  // message counter of the direction sender -> receiver
  uint32_t piece_index = 0;
  uint32_t piece_count = 1;
  uint32_t piece_bytes = 0;  // configured piece size (> 0)
  DType dtype = DType::kU8;
  uint64_t element_count = 0;  // of the whole message
};

inline constexpr size_t kPieceHeaderBytes = 40;
inline constexpr size_t kAssociatedDataBytes = 52;

// Pieces of a message of total_bytes: >= 1 (an empty message is one empty
// piece). TS_CHECK piece_bytes > 0 and that the count fits u32.
uint32_t piece_count(uint64_t total_bytes, uint32_t piece_bytes);
// Payload bytes of piece `index` (TS_CHECK index < piece_count). Derived by the
// receiver, never read from the wire.
size_t piece_payload_bytes(uint64_t total_bytes, uint32_t piece_bytes, uint32_t index);
// Header + payload (+ tag when sealed).
size_t piece_wire_bytes(size_t payload_bytes, bool sealed);
// total_bytes of the message ctx describes: element_count * dtype_size (TS_CHECK
// no overflow).
uint64_t message_bytes(const PieceContext& ctx);

// Writes the 40-byte header of ctx into out[0..40) (out.size() >= kPieceHeaderBytes).
void write_piece_header(const PieceContext& ctx, std::span<uint8_t> out);
// Compares every header field with `expected`, in layout order. The error
// (kInvalidInput) names the field, the value, the expectation and the likely
// cause: "piece header counter: got 199, expected 200 (replayed or reordered piece)".
Status check_piece_header(const PieceContext& expected, std::span<const uint8_t> header);

// The 52-byte associated data of ctx (layout above).
std::vector<uint8_t> associated_data(const PieceContext& ctx);

// Seals the pieces of one direction. Nonces must never repeat under a key, so
// a Sealer accepts only (counter, piece_index) pairs that strictly increase
// (TS_CHECK): seal pieces in order, with a fresh counter per message.
class Sealer {
 public:
  explicit Sealer(const DirectionKey& key);

  // Preconditions (TS_CHECK, the caller's own bugs): piece_index < piece_count,
  // wire.size() == piece_wire_bytes(plain.size(), true), and (counter,
  // piece_index) is above the last one sealed. Writes header, ciphertext, tag;
  // the spans must not overlap. kInternal if OpenSSL fails.
  //
  // Seal does not check that ctx describes plain (plain.size() ==
  // piece_payload_bytes of ctx), so a test can seal a deliberately inconsistent
  // context; the receiver refuses such a piece (length or authentication).
  Status seal(const PieceContext& ctx, std::span<const uint8_t> plain, std::span<uint8_t> wire);

 private:
  std::array<uint8_t, kSaltBytes> salt_;
  GcmCipher cipher_;
  std::optional<std::pair<uint64_t, uint32_t>> last_;  // last (counter, piece_index) sealed
};

// Opens the pieces of one direction against what the receiver expects.
class Opener {
 public:
  explicit Opener(const DirectionKey& key);

  // `expected` and plain.size() come from the receiver, which derives them
  // itself; TS_CHECK that they agree (piece_index < piece_count ==
  // piece_count(message_bytes(expected), piece_bytes), plain.size() ==
  // piece_payload_bytes(...)). Checks wire.size() ==
  // piece_wire_bytes(plain.size(), true) ("piece length: got N bytes, expected M
  // (truncated or padded piece)"), then check_piece_header, then decrypts with
  // associated_data(expected); a tag mismatch is "piece authentication failed
  // (ciphertext, tag or associated data altered): all_sum generation 3 rank 1 ->
  // rank 0 counter 200 piece 2 of 3". Every error is kInvalidInput, and plain is
  // all zeros after any failure. wire and plain must not overlap.
  Status open(const PieceContext& expected, std::span<const uint8_t> wire, std::span<uint8_t> plain);

 private:
  std::array<uint8_t, kSaltBytes> salt_;
  GcmCipher cipher_;
};

}  // namespace tessera::seal
