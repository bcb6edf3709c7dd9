#include "seal/piece.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/check.h"
#include "wire/byte_io.h"
#include "wire/frame.h"

namespace tessera::seal {

namespace {

using detail::concat;

constexpr uint8_t kLastDType = static_cast<uint8_t>(DType::kU8);

std::string op_label(uint8_t code) {
  if (code >= 1 && code <= kLastOp) return std::string(op_name(static_cast<Op>(code)));
  return concat("op ", unsigned{code});
}

std::string dtype_label(uint8_t code) {
  if (code <= kLastDType) return std::string(dtype_name(static_cast<DType>(code)));
  return concat("dtype ", unsigned{code});
}

Status mismatch(std::string_view field, const std::string& got, const std::string& expected, std::string_view cause) {
  return Status::invalid_input(
      concat("piece header ", field, ": got ", got, ", expected ", expected, " (", cause, ")"));
}

Status expect_field(std::string_view field, uint64_t got, uint64_t expected, std::string_view cause) {
  if (got == expected) return {};
  return mismatch(field, std::to_string(got), std::to_string(expected), cause);
}

std::string hex_bytes(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    if (!out.empty()) out += ' ';
    out += "0x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

// The caller's own context and buffer must agree (bugs, not input).
void check_context(const PieceContext& ctx, size_t payload_bytes) {
  TS_CHECK(static_cast<uint8_t>(ctx.op) >= 1 && static_cast<uint8_t>(ctx.op) <= kLastOp,
           "op=", unsigned{static_cast<uint8_t>(ctx.op)});
  TS_CHECK(static_cast<uint8_t>(ctx.dtype) <= kLastDType, "dtype=", unsigned{static_cast<uint8_t>(ctx.dtype)});
  const uint64_t total = message_bytes(ctx);
  TS_CHECK(ctx.piece_count == piece_count(total, ctx.piece_bytes), "piece_count=", ctx.piece_count,
           " message bytes=", total, " piece_bytes=", ctx.piece_bytes);
  TS_CHECK_LT(ctx.piece_index, ctx.piece_count);
  TS_CHECK(payload_bytes == piece_payload_bytes(total, ctx.piece_bytes, ctx.piece_index),
           "payload_bytes=", payload_bytes, " piece_index=", ctx.piece_index, " message bytes=", total,
           " piece_bytes=", ctx.piece_bytes);
}

std::string describe(const PieceContext& ctx) {
  return concat(op_name(ctx.op), " generation ", ctx.generation, " rank ", ctx.sender, " -> rank ", ctx.receiver,
                " counter ", ctx.counter, " piece ", ctx.piece_index, " of ", ctx.piece_count);
}

}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kSend: return "send";
    case Op::kAllSum: return "all_sum";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kActivation: return "activation";
  }
  return "unknown";
}

uint32_t piece_count(uint64_t total_bytes, uint32_t piece_bytes) {
  TS_CHECK(piece_bytes > 0, "piece_bytes=0");
  if (total_bytes == 0) return 1;
  const uint64_t count = (total_bytes - 1) / piece_bytes + 1;
  TS_CHECK(count <= UINT32_MAX, "total_bytes=", total_bytes, " piece_bytes=", piece_bytes);
  return static_cast<uint32_t>(count);
}

size_t piece_payload_bytes(uint64_t total_bytes, uint32_t piece_bytes, uint32_t index) {
  const uint32_t count = piece_count(total_bytes, piece_bytes);
  TS_CHECK(index < count, "index=", index, " count=", count);
  const uint64_t start = uint64_t{index} * piece_bytes;  // < total_bytes unless the message is empty
  return static_cast<size_t>(std::min<uint64_t>(piece_bytes, total_bytes - std::min(start, total_bytes)));
}

size_t piece_wire_bytes(size_t payload_bytes, bool sealed) {
  const size_t overhead = kPieceHeaderBytes + (sealed ? kTagBytes : 0);
  TS_CHECK(payload_bytes <= SIZE_MAX - overhead, "payload_bytes=", payload_bytes);
  return payload_bytes + overhead;
}

uint64_t message_bytes(const PieceContext& ctx) {
  uint64_t total = 0;
  TS_CHECK(wire::checked_mul(ctx.element_count, dtype_size(ctx.dtype), &total), "element_count=", ctx.element_count);
  return total;
}

// The fields the header and the associated data share, in the same order:
// generation, sender, receiver, counter, piece_index, piece_count.
namespace {
void put_route(std::vector<uint8_t>& out, const PieceContext& ctx) {
  wire::put_u64(out, ctx.generation);
  wire::put_u32(out, ctx.sender);
  wire::put_u32(out, ctx.receiver);
  wire::put_u64(out, ctx.counter);
  wire::put_u32(out, ctx.piece_index);
  wire::put_u32(out, ctx.piece_count);
}
}  // namespace

void write_piece_header(const PieceContext& ctx, std::span<uint8_t> out) {
  TS_CHECK(out.size() >= kPieceHeaderBytes, "out.size()=", out.size());
  std::vector<uint8_t> h;
  h.reserve(kPieceHeaderBytes);
  h.insert(h.end(), std::begin(kPieceMagic), std::end(kPieceMagic));
  wire::put_u8(h, kPieceLayout);
  wire::put_u8(h, static_cast<uint8_t>(ctx.op));
  wire::put_u8(h, static_cast<uint8_t>(ctx.dtype));
  wire::put_u16(h, 0);
  put_route(h, ctx);
  TS_CHECK_EQ(h.size(), kPieceHeaderBytes);
  std::copy(h.begin(), h.end(), out.begin());
}

// One guard per line, in layout order (tests/seal/piece_test.cpp removes each in
// turn to prove a test depends on it).
Status check_piece_header(const PieceContext& expected, std::span<const uint8_t> header) {
  const PieceContext& e = expected;
  const std::span<const uint8_t> h = header;
  if (h.size() < kPieceHeaderBytes)
    return Status::invalid_input(
        concat("piece header: got ", h.size(), " bytes, expected ", kPieceHeaderBytes, " (truncated piece)"));
  if (!std::equal(std::begin(kPieceMagic), std::end(kPieceMagic), h.begin()))
    return mismatch("magic", hex_bytes(h.first(3)), "\"TSP\"", "not a piece, or the stream is out of step");
  TS_RETURN_IF_ERROR(expect_field("layout", wire::get_u8(h, 3), kPieceLayout, "peer speaks another piece layout"));
  if (wire::get_u8(h, 4) != static_cast<uint8_t>(e.op))
    return mismatch("op", op_label(wire::get_u8(h, 4)), std::string(op_name(e.op)), "piece of another operation");
  if (wire::get_u8(h, 5) != static_cast<uint8_t>(e.dtype))
    return mismatch("dtype", dtype_label(wire::get_u8(h, 5)), std::string(dtype_name(e.dtype)),
                    "peers disagree on the message dtype");
  TS_RETURN_IF_ERROR(expect_field("reserved", wire::get_u16(h, 6), 0, "reserved bytes must be zero"));
  TS_RETURN_IF_ERROR(
      expect_field("generation", wire::get_u64(h, 8), e.generation,
                   wire::get_u64(h, 8) < e.generation ? "stale generation" : "peer on a newer generation"));
  TS_RETURN_IF_ERROR(expect_field("sender", wire::get_u32(h, 16), e.sender, "piece from the wrong sender"));
  TS_RETURN_IF_ERROR(expect_field("receiver", wire::get_u32(h, 20), e.receiver, "piece meant for another rank"));
  TS_RETURN_IF_ERROR(expect_field("counter", wire::get_u64(h, 24), e.counter, "replayed or reordered piece"));
  TS_RETURN_IF_ERROR(
      expect_field("piece_index", wire::get_u32(h, 32), e.piece_index, "dropped, duplicated or reordered piece"));
  TS_RETURN_IF_ERROR(
      expect_field("piece_count", wire::get_u32(h, 36), e.piece_count, "peers disagree on the message or piece size"));
  return {};
}

std::vector<uint8_t> associated_data(const PieceContext& ctx) {
  std::vector<uint8_t> ad;
  ad.reserve(kAssociatedDataBytes);
  wire::put_u16(ad, wire::kProtocolMajor);
  wire::put_u16(ad, wire::kProtocolMinor);
  wire::put_u8(ad, kPieceLayout);
  wire::put_u8(ad, static_cast<uint8_t>(ctx.op));
  wire::put_u8(ad, static_cast<uint8_t>(ctx.dtype));
  wire::put_u8(ad, 0);
  put_route(ad, ctx);
  wire::put_u32(ad, ctx.piece_bytes);
  wire::put_u64(ad, ctx.element_count);
  TS_CHECK_EQ(ad.size(), kAssociatedDataBytes);
  return ad;
}

Sealer::Sealer(const DirectionKey& key) : salt_(key.salt), cipher_(key.key, GcmCipher::Mode::kEncrypt) {}

Status Sealer::seal(const PieceContext& ctx, std::span<const uint8_t> plain, std::span<uint8_t> wire) {
  // Whether ctx describes plain is not checked here: a test harness may seal a
  // deliberately inconsistent context, and the receiver refuses such a piece.
  TS_CHECK_LT(ctx.piece_index, ctx.piece_count);
  TS_CHECK(wire.size() == piece_wire_bytes(plain.size(), true), "wire.size()=", wire.size(),
           " plain.size()=", plain.size());
  const std::pair<uint64_t, uint32_t> position{ctx.counter, ctx.piece_index};
  TS_CHECK(!last_ || *last_ < position, "nonce reuse: counter ", ctx.counter, " piece ", ctx.piece_index,
           " after counter ", last_->first, " piece ", last_->second);
  last_ = position;  // even if OpenSSL fails below: the nonce may have been used

  write_piece_header(ctx, wire);
  const std::span<uint8_t> cipher = wire.subspan(kPieceHeaderBytes, plain.size());
  const std::span<uint8_t, kTagBytes> tag = wire.subspan(kPieceHeaderBytes + plain.size()).first<kTagBytes>();
  return cipher_.encrypt(piece_nonce(salt_, ctx.counter, ctx.piece_index), associated_data(ctx), plain, cipher, tag);
}

Opener::Opener(const DirectionKey& key) : salt_(key.salt), cipher_(key.key, GcmCipher::Mode::kDecrypt) {}

Status Opener::open(const PieceContext& expected, std::span<const uint8_t> wire, std::span<uint8_t> plain) {
  check_context(expected, plain.size());
  const auto fail = [&](Status status) {
    if (!plain.empty()) std::memset(plain.data(), 0, plain.size());
    return status;
  };
  const size_t want = piece_wire_bytes(plain.size(), true);
  if (wire.size() != want)
    return fail(Status::invalid_input(
        concat("piece length: got ", wire.size(), " bytes, expected ", want, " (truncated or padded piece)")));
  if (Status s = check_piece_header(expected, wire.first(kPieceHeaderBytes)); !s.ok()) return fail(std::move(s));

  const std::span<const uint8_t> cipher = wire.subspan(kPieceHeaderBytes, plain.size());
  const std::span<const uint8_t, kTagBytes> tag = wire.subspan(kPieceHeaderBytes + plain.size()).first<kTagBytes>();
  if (!cipher_.decrypt(piece_nonce(salt_, expected.counter, expected.piece_index), associated_data(expected), cipher,
                       tag, plain)) {
    return fail(Status::invalid_input(
        concat("piece authentication failed (ciphertext, tag or associated data altered): ", describe(expected))));
  }
  return {};
}

}  // namespace tessera::seal
