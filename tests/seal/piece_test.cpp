// Tests of sealed pieces (src/seal/piece.h): sizes, the byte layout of header
// and associated data, a known answer from an independent AES-GCM, round trips,
// and the tamper matrix: every header field, the ciphertext, the tag, every
// field bound only through the associated data, replay, reorder, truncation,
// padding and wrong keys. Every refusal is kInvalidInput and leaves the
// receiver's buffer zeroed.
//
// Verified by reverting (each guard removed in turn, this file's tests fail,
// guard restored): header shorter than 40 bytes, magic, layout, op, dtype,
// reserved, generation, sender, receiver, counter, piece_index, piece_count,
// the wire length check in Opener::open, zeroing of plain on failure (in
// Opener::open and in GcmCipher::decrypt), the op, dtype, piece_count,
// piece_bytes and element_count fields of the associated data, and the Sealer's
// nonce-reuse check.
#include "seal/piece.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "seal_test_util.h"
#include "wire/byte_io.h"

namespace tessera::seal {
namespace {

using testing::expect_invalid;
using testing::from_hex;
using testing::pattern;
using testing::test_secret;

// all_sum generation 3, rank 1 -> rank 0, counter 200, 40 f32 = 160 bytes in
// 64-byte pieces: 3 pieces of 64, 64, 32 bytes; this is the last one.
PieceContext base_context() {
  PieceContext ctx;
  ctx.op = Op::kAllSum;
  ctx.generation = 3;
  ctx.sender = 1;
  ctx.receiver = 0;
  ctx.counter = 200;
  ctx.piece_index = 2;
  ctx.piece_count = 3;
  ctx.piece_bytes = 64;
  ctx.dtype = DType::kF32;
  ctx.element_count = 40;
  return ctx;
}

PieceContext with_index(PieceContext ctx, uint32_t index) {
  ctx.piece_index = index;
  return ctx;
}

size_t payload_of(const PieceContext& ctx) {
  return piece_payload_bytes(message_bytes(ctx), ctx.piece_bytes, ctx.piece_index);
}

DirectionKey data_key(uint32_t from, uint32_t to, uint64_t generation = 3) {
  return derive_key(test_secret(), KeyPurpose::kData, from, to, generation);
}

// Seals pattern(payload) under `key` with a fresh Sealer.
std::vector<uint8_t> seal_piece(const PieceContext& ctx, const DirectionKey& key) {
  const std::vector<uint8_t> plain = pattern(payload_of(ctx));
  std::vector<uint8_t> wire(piece_wire_bytes(plain.size(), true));
  Sealer sealer(key);
  const Status status = sealer.seal(ctx, plain, wire);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return wire;
}

// Opens `wire` against `expected`; on failure also checks that plain was zeroed.
Status open_piece(const PieceContext& expected, const std::vector<uint8_t>& wire, const DirectionKey& key) {
  std::vector<uint8_t> plain(payload_of(expected), 0xaa);
  Opener opener(key);
  Status status = opener.open(expected, wire, plain);
  if (status.ok()) {
    EXPECT_EQ(plain, pattern(plain.size()));
  } else {
    EXPECT_TRUE(std::all_of(plain.begin(), plain.end(), [](uint8_t b) { return b == 0; }))
        << "plain not zeroed after: " << status.to_string();
  }
  return status;
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  std::vector<uint8_t> le;
  wire::put_le(le, value);
  std::copy(le.begin(), le.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset));
}

const char kAuthFailed[] = "piece authentication failed (ciphertext, tag or associated data altered)";

TEST(PieceTest, OpNames) {
  EXPECT_EQ(op_name(Op::kSend), "send");
  EXPECT_EQ(op_name(Op::kAllSum), "all_sum");
  EXPECT_EQ(op_name(Op::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(op_name(Op::kAllGather), "all_gather");
  EXPECT_EQ(op_name(Op::kBroadcast), "broadcast");
  EXPECT_EQ(op_name(Op::kActivation), "activation");
  EXPECT_EQ(op_name(static_cast<Op>(0)), "unknown");
}

TEST(PieceTest, CountsAndPayloadSizes) {
  EXPECT_EQ(piece_count(0, 64), 1u);  // an empty message is one empty piece
  EXPECT_EQ(piece_payload_bytes(0, 64, 0), 0u);
  EXPECT_EQ(piece_count(1, 64), 1u);  // one element of u8
  EXPECT_EQ(piece_payload_bytes(1, 64, 0), 1u);
  EXPECT_EQ(piece_count(128, 64), 2u);  // exact multiple
  EXPECT_EQ(piece_payload_bytes(128, 64, 0), 64u);
  EXPECT_EQ(piece_payload_bytes(128, 64, 1), 64u);
  EXPECT_EQ(piece_count(160, 64), 3u);  // remainder
  EXPECT_EQ(piece_payload_bytes(160, 64, 1), 64u);
  EXPECT_EQ(piece_payload_bytes(160, 64, 2), 32u);
  EXPECT_EQ(piece_count(63, 64), 1u);
  EXPECT_EQ(piece_count(65, 64), 2u);
  EXPECT_EQ(piece_payload_bytes(65, 64, 1), 1u);
  EXPECT_EQ(piece_count(UINT64_C(1) << 40, UINT32_C(1) << 20), UINT32_C(1) << 20);
  EXPECT_EQ(piece_count(uint64_t{UINT32_MAX} * UINT32_MAX, UINT32_MAX), UINT32_MAX);  // the most pieces
  EXPECT_EQ(piece_wire_bytes(32, true), 40u + 32 + 16);
  EXPECT_EQ(piece_wire_bytes(32, false), 40u + 32);
  EXPECT_EQ(piece_wire_bytes(0, true), 56u);
}

TEST(PieceDeathTest, SizePreconditions) {
  EXPECT_DEATH((void)piece_count(10, 0), "piece_bytes");
  EXPECT_DEATH((void)piece_payload_bytes(160, 64, 3), "index=3");
  EXPECT_DEATH((void)piece_count(UINT64_MAX, 1), "total_bytes");
}

TEST(PieceTest, HeaderLayoutIsByteExact) {
  std::vector<uint8_t> header(kPieceHeaderBytes + 3, 0xee);
  write_piece_header(base_context(), header);
  const std::vector<uint8_t> expected = {
      'T', 'S', 'P', 1, 2, 0, 0, 0,  // magic, layout 1, op all_sum, dtype f32, reserved
      3,   0,   0,   0, 0, 0, 0, 0,  // generation 3
      1,   0,   0,   0, 0, 0, 0, 0,  // sender 1, receiver 0
      200, 0,   0,   0, 0, 0, 0, 0,  // counter 200
      2,   0,   0,   0, 3, 0, 0, 0,  // piece_index 2, piece_count 3
  };
  EXPECT_EQ(std::vector<uint8_t>(header.begin(), header.begin() + kPieceHeaderBytes), expected);
  EXPECT_EQ(header[kPieceHeaderBytes], 0xee);  // writes exactly 40 bytes
  EXPECT_TRUE(check_piece_header(base_context(), header).ok());
}

TEST(PieceTest, AssociatedDataLayoutIsByteExact) {
  const std::vector<uint8_t> expected = {
      1,   0, 1, 0, 1, 2, 0, 0,  // protocol 1.1, layout 1, op all_sum, dtype f32, reserved
      3,   0, 0, 0, 0, 0, 0, 0,  // generation 3
      1,   0, 0, 0, 0, 0, 0, 0,  // sender 1, receiver 0
      200, 0, 0, 0, 0, 0, 0, 0,  // counter 200
      2,   0, 0, 0, 3, 0, 0, 0,  // piece_index 2, piece_count 3
      64,  0, 0, 0,              // piece_bytes 64
      40,  0, 0, 0, 0, 0, 0, 0,  // element_count 40
  };
  EXPECT_EQ(associated_data(base_context()), expected);
}

// From an independent AES-GCM (Python cryptography's AESGCM, HKDF by hmac):
//   k, s = okm[:32], okm[32:] of HKDF(secret 00..1f, b'tessera seal v1', pack('<BIIQ', 1, 1, 0, 3), 44)
//   hdr + AESGCM(k).encrypt(s ^ pack('<QI', 200, 2), bytes(range(32)), ad), ad = the bytes above
TEST(PieceTest, SealMatchesIndependentAesGcm) {
  const std::vector<uint8_t> expected = from_hex(
      "545350010200000003000000000000000100000000000000c8000000000000000200000003000000"
      "715a3d8a9459a8f6429fca0171d286ae589e01afc6eea6958ca1dd547e71364b"
      "50f019f0af2007f9271d0fde73463b2c");
  EXPECT_EQ(seal_piece(base_context(), data_key(1, 0)), expected);
  EXPECT_TRUE(open_piece(base_context(), expected, data_key(1, 0)).ok());
}

TEST(PieceTest, RoundTripsSmallAndEdgeSizes) {
  for (uint64_t elements : {0u, 1u, 63u, 64u}) {  // 0, 1, piece_bytes-1, piece_bytes (u8)
    PieceContext ctx = base_context();
    ctx.dtype = DType::kU8;
    ctx.element_count = elements;
    ctx.piece_index = 0;
    ctx.piece_count = 1;
    const std::vector<uint8_t> wire = seal_piece(ctx, data_key(1, 0));
    EXPECT_EQ(wire.size(), kPieceHeaderBytes + elements + kTagBytes);
    const Status status = open_piece(ctx, wire, data_key(1, 0));
    EXPECT_TRUE(status.ok()) << elements << " bytes: " << status.to_string();
  }
}

TEST(PieceTest, RoundTripsAWholeMessageWithOneSealer) {
  const PieceContext ctx = base_context();
  const std::vector<uint8_t> message = pattern(160);
  Sealer sealer(data_key(1, 0));
  Opener opener(data_key(1, 0));
  std::vector<uint8_t> received(160);
  for (uint64_t counter = 200; counter < 203; ++counter) {
    size_t offset = 0;
    for (uint32_t i = 0; i < ctx.piece_count; ++i) {
      PieceContext piece = with_index(ctx, i);
      piece.counter = counter;
      const size_t n = payload_of(piece);
      std::vector<uint8_t> wire(piece_wire_bytes(n, true));
      ASSERT_TRUE(sealer.seal(piece, std::span(message).subspan(offset, n), wire).ok());
      const Status status = opener.open(piece, wire, std::span(received).subspan(offset, n));
      ASSERT_TRUE(status.ok()) << status.to_string();
      offset += n;
    }
    EXPECT_EQ(offset, 160u);
    EXPECT_EQ(received, message);
  }
}

TEST(PieceTest, ErrorNamesTheWholePieceOnAuthFailure) {
  std::vector<uint8_t> wire = seal_piece(base_context(), data_key(1, 0));
  wire[kPieceHeaderBytes + 5] ^= 0x01;  // one ciphertext bit
  expect_invalid(open_piece(base_context(), wire, data_key(1, 0)),
                 {"piece authentication failed (ciphertext, tag or associated data altered): all_sum generation 3 "
                  "rank 1 -> rank 0 counter 200 piece 2 of 3"});
}

TEST(PieceTest, FlippedCiphertextOrTagByteFailsAuthentication) {
  const std::vector<uint8_t> good = seal_piece(base_context(), data_key(1, 0));
  for (size_t offset = kPieceHeaderBytes; offset < good.size(); ++offset) {  // every payload and tag byte
    std::vector<uint8_t> wire = good;
    wire[offset] ^= 0x80;
    SCOPED_TRACE(offset);
    expect_invalid(open_piece(base_context(), wire, data_key(1, 0)), {kAuthFailed});
  }
}

struct HeaderCase {
  const char* name;
  size_t offset;
  uint64_t value;
  size_t width;
  std::string message;
};

// A header field changed on the wire: the check of that field names it.
TEST(PieceTest, EachHeaderFieldIsCheckedByName) {
  const std::vector<HeaderCase> cases = {
      {"magic", 0, 'X', 1, "piece header magic: got 0x58 0x53 0x50, expected \"TSP\""},
      {"layout", 3, 2, 1, "piece header layout: got 2, expected 1 (peer speaks another piece layout)"},
      {"op", 4, 4, 1, "piece header op: got all_gather, expected all_sum (piece of another operation)"},
      {"op unknown", 4, 9, 1, "piece header op: got op 9, expected all_sum"},
      {"dtype", 5, 2, 1, "piece header dtype: got bf16, expected f32"},
      {"dtype unknown", 5, 77, 1, "piece header dtype: got dtype 77, expected f32"},
      {"reserved", 6, 1, 2, "piece header reserved: got 1, expected 0 (reserved bytes must be zero)"},
      {"generation", 8, 2, 8, "piece header generation: got 2, expected 3 (stale generation)"},
      {"generation newer", 8, 4, 8, "piece header generation: got 4, expected 3 (peer on a newer generation)"},
      {"sender", 16, 2, 4, "piece header sender: got 2, expected 1 (piece from the wrong sender)"},
      {"receiver", 20, 5, 4, "piece header receiver: got 5, expected 0 (piece meant for another rank)"},
      {"counter", 24, 199, 8, "piece header counter: got 199, expected 200 (replayed or reordered piece)"},
      {"piece_index", 32, 1, 4, "piece header piece_index: got 1, expected 2 (dropped, duplicated or reordered piece)"},
      {"piece_count", 36, 4, 4, "piece header piece_count: got 4, expected 3"},
  };
  const std::vector<uint8_t> good = seal_piece(base_context(), data_key(1, 0));
  for (const HeaderCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> wire = good;
    switch (c.width) {
      case 1: poke(wire, c.offset, static_cast<uint8_t>(c.value)); break;
      case 2: poke(wire, c.offset, static_cast<uint16_t>(c.value)); break;
      case 4: poke(wire, c.offset, static_cast<uint32_t>(c.value)); break;
      default: poke(wire, c.offset, c.value); break;
    }
    expect_invalid(open_piece(base_context(), wire, data_key(1, 0)), {c.message});
    // The same through check_piece_header alone.
    expect_invalid(check_piece_header(base_context(), std::span(wire).first(kPieceHeaderBytes)), {c.message});
  }
}

TEST(PieceTest, ShortHeaderIsRefused) {
  std::vector<uint8_t> header(kPieceHeaderBytes);
  write_piece_header(base_context(), header);
  expect_invalid(check_piece_header(base_context(), std::span(header).first(39)),
                 {"piece header: got 39 bytes, expected 40"});
}

// A piece legitimately sealed for another message or position: caught by the
// header before any decryption.
TEST(PieceTest, ReplayedAndReorderedPiecesAreRefused) {
  PieceContext replayed = base_context();
  replayed.counter = 199;
  expect_invalid(open_piece(base_context(), seal_piece(replayed, data_key(1, 0)), data_key(1, 0)),
                 {"piece header counter: got 199, expected 200 (replayed or reordered piece)"});
  // Pieces 0 and 1 have the same length, so only the index tells them apart.
  expect_invalid(open_piece(with_index(base_context(), 0), seal_piece(with_index(base_context(), 1), data_key(1, 0)),
                            data_key(1, 0)),
                 {"piece header piece_index: got 1, expected 0 (dropped, duplicated or reordered piece)"});
}

TEST(PieceTest, TruncatedAndPaddedPiecesAreRefused) {
  const std::vector<uint8_t> good = seal_piece(base_context(), data_key(1, 0));
  std::vector<uint8_t> truncated(good.begin(), good.end() - 1);
  expect_invalid(open_piece(base_context(), truncated, data_key(1, 0)),
                 {"piece length: got 87 bytes, expected 88 (truncated or padded piece)"});
  std::vector<uint8_t> padded = good;
  padded.push_back(0);
  expect_invalid(open_piece(base_context(), padded, data_key(1, 0)),
                 {"piece length: got 89 bytes, expected 88 (truncated or padded piece)"});
  expect_invalid(open_piece(base_context(), std::vector<uint8_t>(20, 0), data_key(1, 0)),
                 {"piece length: got 20 bytes, expected 88"});
  // A piece of the length of another position of the same message.
  expect_invalid(open_piece(base_context(), seal_piece(with_index(base_context(), 1), data_key(1, 0)), data_key(1, 0)),
                 {"piece length: got 120 bytes, expected 88"});
}

TEST(PieceTest, WrongKeysFailAuthentication) {
  const std::vector<uint8_t> wire = seal_piece(base_context(), data_key(1, 0));
  expect_invalid(open_piece(base_context(), wire, data_key(0, 1)), {kAuthFailed});     // other direction
  expect_invalid(open_piece(base_context(), wire, data_key(1, 0, 2)), {kAuthFailed});  // other generation
  expect_invalid(open_piece(base_context(), wire, derive_key(test_secret(), KeyPurpose::kHello, 1, 0, 3)),
                 {kAuthFailed});  // hello key
  expect_invalid(open_piece(base_context(), wire, derive_key(test_secret(9), KeyPurpose::kData, 1, 0, 3)),
                 {kAuthFailed});  // other session
  // Sealed under the generation-2 key with a generation-3 header.
  expect_invalid(open_piece(base_context(), seal_piece(base_context(), data_key(1, 0, 2)), data_key(1, 0)),
                 {kAuthFailed});
}

// The sealer and the opener disagree on a field; the header on the wire is
// rewritten to what the opener expects (or the field is not in the header), so
// only the associated data can tell.
TEST(PieceTest, EveryContextFieldIsBoundByTheAssociatedData) {
  struct Case {
    const char* name;
    PieceContext sealed;
    PieceContext expected;
  };
  const PieceContext base = with_index(base_context(), 0);  // 64-byte piece of a 160-byte message
  std::vector<Case> cases;
  const auto add = [&](const char* name, auto change) {
    PieceContext expected = base;
    change(expected);
    cases.push_back({name, base, expected});
  };
  add("op", [](PieceContext& c) { c.op = Op::kReduceScatter; });
  add("dtype (same size)", [](PieceContext& c) { c.dtype = DType::kI32; });
  add("generation", [](PieceContext& c) { c.generation = 4; });
  add("sender", [](PieceContext& c) { c.sender = 2; });
  add("receiver", [](PieceContext& c) { c.receiver = 3; });
  add("counter", [](PieceContext& c) { c.counter = 201; });
  add("piece_index", [](PieceContext& c) { c.piece_index = 1; });
  add("element_count (same piece count)", [](PieceContext& c) { c.element_count = 39; });
  add("element_count and piece_count", [](PieceContext& c) {
    c.element_count = 56;  // 224 bytes: 4 pieces
    c.piece_count = 4;
  });
  // piece_bytes alone: a one-piece message of 32 bytes in 64- or 128-byte pieces.
  PieceContext small = base;
  small.element_count = 8;
  small.piece_count = 1;
  PieceContext small_other = small;
  small_other.piece_bytes = 128;
  cases.push_back({"piece_bytes", small, small_other});
  PieceContext dtype_other = small;  // 32 bytes of f32 or of i64
  dtype_other.dtype = DType::kI64;
  dtype_other.element_count = 4;
  cases.push_back({"dtype and element_count (same bytes)", small, dtype_other});

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(payload_of(c.sealed), payload_of(c.expected));
    std::vector<uint8_t> wire = seal_piece(c.sealed, data_key(c.sealed.sender, c.sealed.receiver, c.sealed.generation));
    write_piece_header(c.expected, wire);
    const DirectionKey opener_key = data_key(c.expected.sender, c.expected.receiver, c.expected.generation);
    expect_invalid(open_piece(c.expected, wire, opener_key), {kAuthFailed});
    // Same keys as the sealer (isolates the associated data from key separation).
    expect_invalid(open_piece(c.expected, wire, data_key(c.sealed.sender, c.sealed.receiver, c.sealed.generation)),
                   {kAuthFailed});
  }
}

TEST(PieceTest, SealerAndOpenerMove) {
  Sealer sealer(data_key(1, 0));
  Sealer moved_sealer = std::move(sealer);
  Opener opener(data_key(1, 0));
  Opener moved_opener(std::move(opener));
  const PieceContext ctx = base_context();
  const std::vector<uint8_t> plain = pattern(32);
  std::vector<uint8_t> wire(piece_wire_bytes(32, true));
  ASSERT_TRUE(moved_sealer.seal(ctx, plain, wire).ok());
  std::vector<uint8_t> out(32);
  ASSERT_TRUE(moved_opener.open(ctx, wire, out).ok());
  EXPECT_EQ(out, plain);
}

// The cipher under Sealer/Opener zeroes a failed decryption itself (Opener
// zeroes again; this covers other users such as hello.cpp).
TEST(PieceTest, GcmCipherZeroesPlainOnTagMismatch) {
  const DirectionKey key = data_key(1, 0);
  const std::array<uint8_t, kSaltBytes> nonce = piece_nonce(key, 5, 0);
  const std::vector<uint8_t> ad = {1, 2, 3};
  const std::vector<uint8_t> plain = pattern(100);
  std::vector<uint8_t> cipher(100);
  std::array<uint8_t, kTagBytes> tag;
  GcmCipher sealing(key.key, GcmCipher::Mode::kEncrypt);
  ASSERT_TRUE(sealing.encrypt(nonce, ad, plain, cipher, tag).ok());
  GcmCipher opening(key.key, GcmCipher::Mode::kDecrypt);
  std::vector<uint8_t> out(100);
  ASSERT_TRUE(opening.decrypt(nonce, ad, cipher, tag, out));
  EXPECT_EQ(out, plain);
  tag[0] ^= 1;
  EXPECT_FALSE(opening.decrypt(nonce, ad, cipher, tag, out));
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
}

TEST(PieceDeathTest, SealerRefusesToReuseANonce) {
  const PieceContext ctx = base_context();
  const std::vector<uint8_t> plain = pattern(32);
  std::vector<uint8_t> wire(piece_wire_bytes(32, true));
  EXPECT_DEATH(
      {
        Sealer sealer(data_key(1, 0));
        (void)sealer.seal(ctx, plain, wire);
        (void)sealer.seal(ctx, plain, wire);
      },
      "nonce reuse: counter 200 piece 2 after counter 200 piece 2");
  EXPECT_DEATH(
      {
        Sealer sealer(data_key(1, 0));
        (void)sealer.seal(ctx, plain, wire);
        PieceContext earlier = with_index(ctx, 1);
        std::vector<uint8_t> wire64(piece_wire_bytes(64, true));
        const std::vector<uint8_t> plain64 = pattern(64);
        (void)sealer.seal(earlier, plain64, wire64);
      },
      "nonce reuse");
}

TEST(PieceDeathTest, InconsistentContextsAreBugs) {
  const std::vector<uint8_t> plain = pattern(32);
  std::vector<uint8_t> wire(piece_wire_bytes(32, true));
  Sealer sealer(data_key(1, 0));
  std::vector<uint8_t> short_wire(wire.size() - 1);
  EXPECT_DEATH((void)sealer.seal(base_context(), plain, short_wire), "wire.size");
  EXPECT_DEATH((void)sealer.seal(with_index(base_context(), 3), plain, wire), "piece_index");
  // The receiver's own expectation must agree with its buffer.
  Opener opener(data_key(1, 0));
  std::vector<uint8_t> out(31);
  EXPECT_DEATH((void)opener.open(base_context(), wire, out), "payload_bytes=31");
  PieceContext bad_count = base_context();
  bad_count.piece_count = 4;
  std::vector<uint8_t> out32(32);
  EXPECT_DEATH((void)opener.open(bad_count, wire, out32), "piece_count=4");
}

// A sender whose context does not describe its payload (here one element more,
// as a test harness forges it): Sealer seals it, the receiver refuses it.
TEST(PieceTest, InconsistentSenderContextIsRefusedByTheReceiver) {
  PieceContext forged = base_context();
  forged.element_count = 41;  // 164 bytes: the last piece would be 36 bytes, not 32
  const std::vector<uint8_t> plain = pattern(32);
  std::vector<uint8_t> wire(piece_wire_bytes(32, true));
  Sealer sealer(data_key(1, 0));
  ASSERT_TRUE(sealer.seal(forged, plain, wire).ok());
  expect_invalid(open_piece(base_context(), wire, data_key(1, 0)), {kAuthFailed});
}

}  // namespace
}  // namespace tessera::seal
