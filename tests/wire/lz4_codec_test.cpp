// Tests of the LZ4 block codec (src/wire/lz4_codec.h): decompression goes only
// into a buffer sized by the receiver, and must fill it exactly.
//
// Verified by reverting (each check removed in turn, a test here fails, check
// restored): decoded size above one LZ4 block, compressed size above LZ4's bound,
// corrupt or over-long block (n < 0), LZ4 size lie (decodes to fewer bytes).
#include "wire/lz4_codec.h"

#include <gtest/gtest.h>
#include <lz4.h>
#include <sys/mman.h>

#include "wire_test_util.h"

namespace tessera::wire {
namespace {

using testing::expect_invalid;
using testing::pattern;

std::vector<uint8_t> compressible(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>((i / 16) % 7);
  return out;
}

TEST(Lz4CodecTest, BoundMatchesLiblz4) {
  for (int n : {0, 1, 255, 4096, 1 << 20})
    EXPECT_EQ(lz4_compress_bound(n), static_cast<uint64_t>(LZ4_compressBound(n)));
}

TEST(Lz4CodecTest, RoundTrips) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{1} << 16}) {
    for (const std::vector<uint8_t>& data : {compressible(n), pattern(n)}) {
      const std::vector<uint8_t> block = lz4_compress(data);
      std::vector<uint8_t> out(n);
      ASSERT_TRUE(lz4_decompress_exact("x", block, out).ok()) << n;
      EXPECT_EQ(out, data);
    }
  }
}

TEST(Lz4CodecTest, RefusesBlockThatDecodesShort) {
  const std::vector<uint8_t> block = lz4_compress(compressible(1000));
  std::vector<uint8_t> out(1001);
  expect_invalid(lz4_decompress_exact("x", block, out), {"x lz4: decoded 1000 bytes != expected 1001"});
}

TEST(Lz4CodecTest, RefusesBlockThatDecodesLong) {
  const std::vector<uint8_t> block = lz4_compress(compressible(1000));
  std::vector<uint8_t> out(999);
  expect_invalid(lz4_decompress_exact("x", block, out), {"x lz4: corrupt block, or it decodes to more than 999 bytes"});
}

TEST(Lz4CodecTest, RefusesCorruptBlock) {
  std::vector<uint8_t> block = lz4_compress(compressible(1000));
  block.resize(block.size() / 2);
  std::vector<uint8_t> out(1000);
  expect_invalid(lz4_decompress_exact("x", block, out), {"x lz4: corrupt block"});
  expect_invalid(lz4_decompress_exact("x", {}, out), {"x lz4: corrupt block"});
}

TEST(Lz4CodecTest, RefusesCompressedSizeAboveBound) {
  // A valid block padded past the bound: liblz4 would stop early, the bound catches it.
  std::vector<uint8_t> block = lz4_compress(compressible(100));
  std::vector<uint8_t> out(100);
  block.resize(lz4_compress_bound(100) + 1);
  expect_invalid(lz4_decompress_exact("x", block, out), {"x lz4: compressed size 117 > bound 116 of 100 bytes"});
}

TEST(Lz4CodecTest, RefusesDecodedSizeAboveOneBlock) {
  // Address space only: the check refuses before a byte of it is touched.
  const size_t n = kLz4MaxBlockBytes + 1;
  void* p = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const std::vector<uint8_t> block = lz4_compress(compressible(100));
  expect_invalid(lz4_decompress_exact("x", block, {static_cast<uint8_t*>(p), n}),
                 {"x lz4: decoded size 2113929217 > max block 2113929216"});
  munmap(p, n);
}

}  // namespace
}  // namespace tessera::wire
