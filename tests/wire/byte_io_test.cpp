// Tests of the little-endian helpers and checked arithmetic (src/wire/byte_io.h).
#include "wire/byte_io.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::wire {
namespace {

TEST(ByteIoTest, WritesLittleEndian) {
  std::vector<uint8_t> out;
  put_u8(out, 0xab);
  put_u16(out, 0x0102);
  put_u32(out, 0x03040506);
  put_u64(out, 0x0708090a0b0c0d0eULL);
  const std::vector<uint8_t> expected = {0xab, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0e,
                                         0x0d, 0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x07};
  EXPECT_EQ(out, expected);
}

TEST(ByteIoTest, ReadsWhatItWrites) {
  std::vector<uint8_t> out;
  put_u16(out, 0xfffe);
  put_u32(out, 0xdeadbeef);
  put_u64(out, UINT64_MAX - 1);
  EXPECT_EQ(get_u16(out, 0), 0xfffe);
  EXPECT_EQ(get_u32(out, 2), 0xdeadbeefu);
  EXPECT_EQ(get_u64(out, 6), UINT64_MAX - 1);
  EXPECT_EQ(get_u8(out, 13), 0xff);
}

TEST(ByteIoDeathTest, ReadPastTheEndIsABug) {
  const std::vector<uint8_t> bytes(7);
  EXPECT_DEATH((void)get_u64(bytes, 0), "offset=0 size=7");
  EXPECT_DEATH((void)get_u16(bytes, 6), "offset=6 size=7");
  EXPECT_DEATH((void)get_u8(bytes, SIZE_MAX), "offset=");
}

TEST(ByteIoTest, CheckedArithmeticReportsOverflow) {
  uint64_t out = 0;
  EXPECT_TRUE(checked_add(UINT64_MAX - 1, 1, &out));
  EXPECT_EQ(out, UINT64_MAX);
  EXPECT_FALSE(checked_add(UINT64_MAX, 1, &out));
  EXPECT_TRUE(checked_mul(uint64_t{1} << 32, (uint64_t{1} << 32) - 1, &out));
  EXPECT_FALSE(checked_mul(uint64_t{1} << 32, uint64_t{1} << 32, &out));
}

}  // namespace
}  // namespace tessera::wire
