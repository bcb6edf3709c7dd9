// Tests of layer chunking and reassembly (src/wire/layer_payload.h).
//
// Verified by reverting (each check removed in turn, a test here fails, check
// restored): header length != 32, wrong layer, original_bytes above
// max_layer_bytes (reassembly over the maximum, before anything is reserved),
// odd byte count from a 16-bit source, stored size lie (plain and quantized),
// chunk disagreeing with the first, chunk_offset out of order (gap and repeat),
// chunk past the declared stored size (reassembly over the maximum), incomplete
// reassembly at finish, finish with no chunk, LZ4 size lie at finish, refusal
// after an error or after finish.
#include "wire/layer_payload.h"

#include <gtest/gtest.h>

#include <bit>

#include "wire/byte_io.h"
#include "wire/lz4_codec.h"
#include "wire/quant.h"
#include "wire_test_util.h"

namespace tessera::wire {
namespace {

using testing::expect_invalid;
using testing::pattern;

LayerLimits limits_for(uint8_t flags = 0, uint64_t max_layer_bytes = 1 << 20) {
  LayerLimits limits;
  limits.name = "layer 3";
  limits.layer = 3;
  limits.dtypes = {DType::kBF16, DType::kF16, DType::kF32, DType::kU8};
  limits.flags = flags;
  limits.max_layer_bytes = max_layer_bytes;
  return limits;
}

std::vector<uint8_t> bf16_weights(size_t n) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < n; ++i) put_u16(out, f32_to_bf16(static_cast<float>(static_cast<int>(i % 31) - 15) / 16));
  return out;
}

Result<std::vector<uint8_t>> reassemble(const std::vector<LayerChunk>& chunks, const LayerLimits& limits) {
  LayerAssembler assembler(limits);
  for (const LayerChunk& c : chunks) TS_RETURN_IF_ERROR(assembler.add_chunk(c.header, c.payload));
  return assembler.finish();
}

TEST(LayerPayloadTest, HeaderLayoutIsByteExact) {
  const std::vector<uint8_t> header =
      encode_layer_chunk_header(LayerChunkHeader{Encoding{DType::kBF16, kFlagInt4 | kFlagLz4, 64}, 3, 1024, 300, 256});
  std::vector<uint8_t> expected = {3, 5, 64, 0, 3, 0, 0, 0};
  put_u64(expected, 1024);
  put_u64(expected, 300);
  put_u64(expected, 256);
  EXPECT_EQ(header, expected);
}

TEST(LayerPayloadTest, PlainChunksReassembleExactly) {
  const std::vector<uint8_t> data = pattern(10000);
  for (uint64_t chunk : {uint64_t{1}, uint64_t{7}, uint64_t{4096}, uint64_t{10000}, uint64_t{1} << 20}) {
    const std::vector<LayerChunk> chunks = encode_layer_chunks(3, Encoding{DType::kU8, 0, 0}, data, chunk);
    EXPECT_EQ(chunks.size(), (10000 + chunk - 1) / chunk);
    const Result<std::vector<uint8_t>> out = reassemble(chunks, limits_for());
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(*out, data);
  }
}

TEST(LayerPayloadTest, EmptyLayerIsOneEmptyChunk) {
  const std::vector<LayerChunk> chunks = encode_layer_chunks(3, Encoding{DType::kU8, 0, 0}, {}, 64);
  ASSERT_EQ(chunks.size(), 1u);
  const Result<std::vector<uint8_t>> out = reassemble(chunks, limits_for());
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(out->empty());
}

TEST(LayerPayloadTest, CompressedAndQuantizedLayersReassemble) {
  const std::vector<uint8_t> data = bf16_weights(4096);
  for (const Encoding& e : {Encoding{DType::kBF16, kFlagLz4, 0}, Encoding{DType::kBF16, kFlagInt8, 32},
                            Encoding{DType::kBF16, kFlagInt4 | kFlagLz4, 128}}) {
    LayerAssembler assembler(limits_for(kKnownFlags));
    const std::vector<LayerChunk> chunks = encode_layer_chunks(3, e, data, 1000);
    for (const LayerChunk& c : chunks) {
      EXPECT_FALSE(assembler.complete());
      ASSERT_TRUE(assembler.add_chunk(c.header, c.payload).ok());
    }
    EXPECT_TRUE(assembler.complete());
    const Result<std::vector<uint8_t>> out = assembler.finish();
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->size(), data.size());
    for (size_t i = 0; i < 4096; ++i) {
      const float want = bf16_to_f32(get_u16(data, 2 * i));
      const float got = bf16_to_f32(get_u16(*out, 2 * i));
      EXPECT_NEAR(got, want, e.quant_bits() == 4 ? 0.07f : e.quant_bits() == 8 ? 0.005f : 0.0f) << i;
    }
  }
}

// Header fields as a peer may set them: a consistent plain u8 layer of 100 bytes.
LayerChunkHeader plain_header(uint64_t offset = 0) { return {Encoding{DType::kU8, 0, 0}, 3, 100, 100, offset}; }

TEST(LayerPayloadTest, RefusesHeaderOfWrongLength) {
  LayerAssembler assembler(limits_for());
  std::vector<uint8_t> header = encode_layer_chunk_header(plain_header());
  header.push_back(0);
  expect_invalid(assembler.add_chunk(header, pattern(100)), {"layer 3 header: 33 bytes != 32"});
  header.resize(31);
  LayerAssembler again(limits_for());
  expect_invalid(again.add_chunk(header, pattern(100)), {"layer 3 header: 31 bytes != 32"});
}

TEST(LayerPayloadTest, RefusesOtherLayer) {
  LayerChunkHeader h = plain_header();
  h.layer = 4;
  LayerAssembler assembler(limits_for());
  expect_invalid(assembler.add_chunk(encode_layer_chunk_header(h), pattern(100)), {"layer 3 layer: 4 != expected 3"});
}

TEST(LayerPayloadTest, RefusesOriginalAboveMaxBeforeReserving) {
  LayerChunkHeader h{Encoding{DType::kU8, kFlagLz4, 0}, 3, 1001, 40, 0};
  LayerAssembler assembler(limits_for(kFlagLz4, 1000));
  expect_invalid(assembler.add_chunk(encode_layer_chunk_header(h), pattern(40)),
                 {"layer 3 original_bytes: 1001 > max_layer_bytes 1000"});
  EXPECT_EQ(assembler.received_bytes(), 0u);
}

TEST(LayerPayloadTest, RefusesOddByteCountFromSixteenBitSource) {
  LayerChunkHeader h{Encoding{DType::kBF16, kFlagInt8, 32}, 3, 129, 36, 0};
  LayerAssembler assembler(limits_for(kFlagInt8));
  expect_invalid(assembler.add_chunk(encode_layer_chunk_header(h), pattern(36)),
                 {"layer 3 original_bytes: 129 not a multiple of 2 (dtype bf16)"});
  h.encoding = Encoding{DType::kF16, 0, 0};
  h.stored_bytes = 129;
  LayerAssembler plain(limits_for());
  expect_invalid(plain.add_chunk(encode_layer_chunk_header(h), pattern(129)), {"not a multiple of 2 (dtype f16)"});
}

TEST(LayerPayloadTest, RefusesStoredSizeLie) {
  LayerChunkHeader h = plain_header();
  h.stored_bytes = 101;
  LayerAssembler assembler(limits_for());
  expect_invalid(assembler.add_chunk(encode_layer_chunk_header(h), pattern(100)),
                 {"layer 3 stored_bytes: 101 != expected 100"});
  h = LayerChunkHeader{Encoding{DType::kBF16, kFlagInt8, 32}, 3, 128, 37, 0};  // 64 elements: 2 * 36 bytes
  LayerAssembler quantized(limits_for(kFlagInt8));
  expect_invalid(quantized.add_chunk(encode_layer_chunk_header(h), pattern(37)),
                 {"layer 3 stored_bytes: 37 != expected 72"});
}

TEST(LayerPayloadTest, RefusesChunkThatDisagreesWithTheFirst) {
  LayerAssembler assembler(limits_for());
  ASSERT_TRUE(assembler.add_chunk(encode_layer_chunk_header(plain_header()), pattern(50)).ok());
  LayerChunkHeader h{Encoding{DType::kU8, 0, 0}, 3, 200, 200, 50};
  expect_invalid(assembler.add_chunk(encode_layer_chunk_header(h), pattern(50)),
                 {"layer 3 header: chunk disagrees with the first chunk"});
}

TEST(LayerPayloadTest, RefusesChunksOutOfOrder) {
  LayerAssembler gap(limits_for());
  ASSERT_TRUE(gap.add_chunk(encode_layer_chunk_header(plain_header(0)), pattern(50)).ok());
  expect_invalid(gap.add_chunk(encode_layer_chunk_header(plain_header(60)), pattern(40)),
                 {"layer 3 chunk_offset: 60 != 50 bytes received"});
  LayerAssembler repeat(limits_for());
  ASSERT_TRUE(repeat.add_chunk(encode_layer_chunk_header(plain_header(0)), pattern(50)).ok());
  expect_invalid(repeat.add_chunk(encode_layer_chunk_header(plain_header(0)), pattern(50)),
                 {"layer 3 chunk_offset: 0 != 50 bytes received"});
}

TEST(LayerPayloadTest, RefusesReassemblyPastDeclaredSize) {
  LayerAssembler assembler(limits_for());
  ASSERT_TRUE(assembler.add_chunk(encode_layer_chunk_header(plain_header(0)), pattern(60)).ok());
  expect_invalid(assembler.add_chunk(encode_layer_chunk_header(plain_header(60)), pattern(41)),
                 {"layer 3 chunk: offset 60 + 41 bytes > stored_bytes 100"});
  EXPECT_EQ(assembler.received_bytes(), 60u);
  LayerAssembler single(limits_for());
  expect_invalid(single.add_chunk(encode_layer_chunk_header(plain_header(0)), pattern(101)),
                 {"layer 3 chunk: offset 0 + 101 bytes > stored_bytes 100"});
}

TEST(LayerPayloadTest, RefusesIncompleteReassembly) {
  LayerAssembler assembler(limits_for());
  ASSERT_TRUE(assembler.add_chunk(encode_layer_chunk_header(plain_header(0)), pattern(99)).ok());
  EXPECT_FALSE(assembler.complete());
  expect_invalid(assembler.finish(), {"layer 3 reassembled: 99 bytes != stored_bytes 100"});
  LayerAssembler none(limits_for());
  expect_invalid(none.finish(), {"layer 3: no chunk received"});
}

TEST(LayerPayloadTest, RefusesLz4SizeLieAtFinish) {
  const std::vector<uint8_t> block = lz4_compress(pattern(99));  // declared 100
  LayerChunkHeader h{Encoding{DType::kU8, kFlagLz4, 0}, 3, 100, block.size(), 0};
  LayerAssembler assembler(limits_for(kFlagLz4));
  ASSERT_TRUE(assembler.add_chunk(encode_layer_chunk_header(h), block).ok());
  expect_invalid(assembler.finish(), {"layer 3 lz4: decoded 99 bytes != expected 100"});
}

TEST(LayerPayloadTest, StaysFailedAfterAnError) {
  LayerAssembler assembler(limits_for());
  LayerChunkHeader bad = plain_header();
  bad.layer = 9;
  EXPECT_FALSE(assembler.add_chunk(encode_layer_chunk_header(bad), pattern(100)).ok());
  expect_invalid(assembler.add_chunk(encode_layer_chunk_header(plain_header()), pattern(100)),
                 {"layer 3: refused: an earlier chunk failed or the layer is finished"});
  expect_invalid(assembler.finish(), {"an earlier chunk failed or the layer is finished"});
}

TEST(LayerPayloadTest, FinishesOnce) {
  LayerAssembler assembler(limits_for());
  ASSERT_TRUE(assembler.add_chunk(encode_layer_chunk_header(plain_header()), pattern(100)).ok());
  ASSERT_TRUE(assembler.finish().ok());
  expect_invalid(assembler.finish(), {"an earlier chunk failed or the layer is finished"});
}

}  // namespace
}  // namespace tessera::wire
