// Fixed keys and expected contexts shared by the seal fuzz targets and
// fuzz/make_seal_corpus.cpp, so the committed seeds open under the targets'
// expectations.
//
// seal_piece_fuzz input: bytes 0..1 (u16 LE) choose what the receiver expects,
// bounded: a u8 message of (v & 0x7ff) bytes in 512-byte pieces
// (at most 4 pieces of at most 512 bytes), piece index (v >> 11) mod count; the
// rest of the input is the piece as it arrived.
#pragma once

#include <cstdint>
#include <span>

#include "seal/hello.h"
#include "seal/key_schedule.h"
#include "seal/piece.h"

namespace tessera::seal::fuzz {

inline constexpr uint32_t kFuzzPieceBytes = 512;

inline Secret fuzz_secret() {
  Secret secret;
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(0x5a ^ (i * 29));
  return secret;
}

inline DirectionKey fuzz_key() { return derive_key(fuzz_secret(), KeyPurpose::kData, 2, 5, 7); }

// What the receiver expects for selector v.
inline PieceContext expected_context(uint16_t v) {
  PieceContext ctx;
  ctx.op = Op::kAllGather;
  ctx.generation = 7;
  ctx.sender = 2;
  ctx.receiver = 5;
  ctx.counter = 1000;
  ctx.piece_bytes = kFuzzPieceBytes;
  ctx.dtype = DType::kU8;
  ctx.element_count = v & 0x7ffu;
  ctx.piece_count = piece_count(ctx.element_count, kFuzzPieceBytes);
  ctx.piece_index = static_cast<uint32_t>(v >> 11) % ctx.piece_count;
  return ctx;
}

inline size_t expected_payload_bytes(const PieceContext& ctx) {
  return piece_payload_bytes(message_bytes(ctx), ctx.piece_bytes, ctx.piece_index);
}

// seal_hello_fuzz: what the receiver (rank 5) expects of rank 2 in generation 7.
inline Hello expected_hello() {
  Hello hello;
  hello.sender = 2;
  hello.receiver = 5;
  hello.generation = 7;
  return hello;
}

}  // namespace tessera::seal::fuzz
