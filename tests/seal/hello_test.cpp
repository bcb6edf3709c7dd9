// Tests of the connection hello (src/seal/hello.h): layout, a known answer from
// an independent AES-GCM, round trips, each field mismatch, tampering, wrong
// secrets and peek_hello on short or garbage input.
//
// Verified by reverting (each guard removed in turn, this file's tests fail,
// guard restored): length, magic, layout, unknown flags, sender, receiver,
// generation, plain, and the tag check.
#include "seal/hello.h"

#include <gtest/gtest.h>

#include <vector>

#include "seal_test_util.h"
#include "wire/byte_io.h"

namespace tessera::seal {
namespace {

using testing::expect_invalid;
using testing::from_hex;
using testing::test_secret;

Hello base_hello() {
  Hello hello;
  hello.sender = 1;
  hello.receiver = 0;
  hello.generation = 3;
  hello.plain = false;
  return hello;
}

std::vector<uint8_t> sealed(const Hello& hello, const Secret& secret = test_secret()) {
  const std::array<uint8_t, kHelloBytes> bytes = seal_hello(secret, hello);
  return {bytes.begin(), bytes.end()};
}

const char kAuthFailed[] = "hello authentication failed";

TEST(HelloTest, LayoutIsByteExact) {
  Hello hello = base_hello();
  hello.plain = true;
  hello.sender = 0x01020304;
  hello.receiver = 5;
  hello.generation = 0x0a0b;
  const std::vector<uint8_t> bytes = sealed(hello);
  const std::vector<uint8_t> expected = {
      'T', 'S', 'H', 1, 1, 0, 0, 0,  // magic, layout 1, flags: plain
      4,   3,   2,   1, 5, 0, 0, 0,  // sender, receiver
      0xb, 0xa, 0,   0, 0, 0, 0, 0,  // generation
  };
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 24), expected);
}

// From Python cryptography's AESGCM with HKDF by hmac (see piece_test.cpp):
//   k, s = HKDF(secret 00..1f, b'tessera seal v1', pack('<BIIQ', 2, 1, 0, 3), 44)
//   f = b'TSH' + pack('<BIIIQ', 1, 1, 1, 0, 3);  f + AESGCM(k).encrypt(s, b'', f)
TEST(HelloTest, MatchesIndependentAesGcm) {
  Hello hello = base_hello();
  hello.plain = true;
  const std::vector<uint8_t> expected =
      from_hex("5453480101000000010000000000000003000000000000007e1c59ea4c534a60a44ca86cd60addba");
  EXPECT_EQ(sealed(hello), expected);
  EXPECT_TRUE(open_hello(test_secret(), hello, expected).ok());
}

TEST(HelloTest, RoundTrips) {
  for (bool plain : {false, true}) {
    Hello hello = base_hello();
    hello.plain = plain;
    const std::vector<uint8_t> bytes = sealed(hello);
    const Result<Hello> peeked = peek_hello(bytes);
    ASSERT_TRUE(peeked.ok()) << peeked.status().to_string();
    EXPECT_EQ(peeked->sender, 1u);
    EXPECT_EQ(peeked->receiver, 0u);
    EXPECT_EQ(peeked->generation, 3u);
    EXPECT_EQ(peeked->plain, plain);
    const Status status = open_hello(test_secret(), hello, bytes);
    EXPECT_TRUE(status.ok()) << status.to_string();
  }
}

TEST(HelloTest, EachFieldMustEqualTheExpectation) {
  const std::vector<uint8_t> bytes = sealed(base_hello());
  Hello e = base_hello();
  e.sender = 2;
  expect_invalid(open_hello(test_secret(), e, bytes), {"hello sender: got 1, expected 2"});
  e = base_hello();
  e.receiver = 7;
  expect_invalid(open_hello(test_secret(), e, bytes), {"hello receiver: got 0, expected 7"});
  e = base_hello();
  e.generation = 4;
  expect_invalid(open_hello(test_secret(), e, bytes), {"hello generation: got 3, expected 4 (stale generation)"});
  e = base_hello();
  e.plain = true;
  expect_invalid(open_hello(test_secret(), e, bytes), {"hello plain: got 0, expected 1"});
}

// Fields rewritten on the wire to what the receiver expects: only the tag can tell.
TEST(HelloTest, RewrittenFieldsFailAuthentication) {
  const std::vector<uint8_t> good = sealed(base_hello());
  struct Case {
    const char* name;
    size_t offset;
    uint8_t value;
    Hello expected;
  };
  Hello plain = base_hello();
  plain.plain = true;
  Hello sender = base_hello();
  sender.sender = 2;
  Hello receiver = base_hello();
  receiver.receiver = 2;
  Hello generation = base_hello();
  generation.generation = 2;
  for (const Case& c : {Case{"plain", 4, 1, plain}, Case{"sender", 8, 2, sender}, Case{"receiver", 12, 2, receiver},
                        Case{"generation", 16, 2, generation}}) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> bytes = good;
    bytes[c.offset] = c.value;
    expect_invalid(open_hello(test_secret(), c.expected, bytes), {kAuthFailed});
  }
}

TEST(HelloTest, FlippedTagAndWrongSecretFail) {
  const std::vector<uint8_t> good = sealed(base_hello());
  for (size_t offset = 24; offset < kHelloBytes; ++offset) {
    std::vector<uint8_t> bytes = good;
    bytes[offset] ^= 0x01;
    expect_invalid(open_hello(test_secret(), base_hello(), bytes), {kAuthFailed, "rank 1 -> rank 0 generation 3"});
  }
  expect_invalid(open_hello(test_secret(1), base_hello(), good), {kAuthFailed});
  // A hello made for the other direction, with its fields as they are.
  Hello reverse = base_hello();
  reverse.sender = 0;
  reverse.receiver = 1;
  expect_invalid(open_hello(test_secret(), reverse, good), {"hello sender: got 1, expected 0"});
}

TEST(HelloTest, PeekRefusesShortAndGarbageInput) {
  const std::vector<uint8_t> good = sealed(base_hello());
  expect_invalid(peek_hello({}).status(), {"hello length: got 0 bytes, expected 40"});
  expect_invalid(peek_hello(std::span(good).first(39)).status(), {"hello length: got 39 bytes, expected 40"});
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  expect_invalid(peek_hello(longer).status(), {"hello length: got 41 bytes, expected 40"});
  expect_invalid(peek_hello(std::vector<uint8_t>(40, 0xff)).status(), {"hello magic"});
  std::vector<uint8_t> piece = good;
  piece[2] = 'P';  // a piece header where a hello belongs
  expect_invalid(peek_hello(piece).status(), {"hello magic"});
  std::vector<uint8_t> layout = good;
  layout[3] = 2;
  expect_invalid(peek_hello(layout).status(), {"hello layout: got 2, expected 1"});
  std::vector<uint8_t> flags = good;
  flags[5] = 0x80;  // bit 15
  expect_invalid(peek_hello(flags).status(), {"hello flags: got 0x8000"});
  // open_hello runs the same checks.
  expect_invalid(open_hello(test_secret(), base_hello(), flags), {"hello flags"});
  expect_invalid(open_hello(test_secret(), base_hello(), layout), {"hello layout"});
  expect_invalid(open_hello(test_secret(), base_hello(), std::span(good).first(39)), {"hello length"});
}

}  // namespace
}  // namespace tessera::seal
