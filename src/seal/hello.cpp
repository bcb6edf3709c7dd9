#include "seal/hello.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/check.h"
#include "seal/gcm.h"
#include "wire/byte_io.h"

namespace tessera::seal {

namespace {

using detail::concat;

constexpr size_t kHelloSignedBytes = 24;

std::vector<uint8_t> encode_fields(const Hello& hello) {
  std::vector<uint8_t> out;
  out.reserve(kHelloBytes);
  out.insert(out.end(), std::begin(kHelloMagic), std::end(kHelloMagic));
  wire::put_u8(out, kHelloLayout);
  wire::put_u32(out, hello.plain ? kHelloFlagPlain : 0);
  wire::put_u32(out, hello.sender);
  wire::put_u32(out, hello.receiver);
  wire::put_u64(out, hello.generation);
  TS_CHECK_EQ(out.size(), kHelloSignedBytes);
  return out;
}

DirectionKey hello_key(const Secret& secret, const Hello& hello) {
  return derive_key(secret, KeyPurpose::kHello, hello.sender, hello.receiver, hello.generation);
}

Status expect_field(std::string_view field, uint64_t got, uint64_t expected, std::string_view cause) {
  if (got == expected) return {};
  return Status::invalid_input(concat("hello ", field, ": got ", got, ", expected ", expected, " (", cause, ")"));
}

}  // namespace

std::array<uint8_t, kHelloBytes> seal_hello(const Secret& secret, const Hello& hello) {
  const std::vector<uint8_t> fields = encode_fields(hello);
  const DirectionKey key = hello_key(secret, hello);
  std::array<uint8_t, kHelloBytes> out{};
  std::copy(fields.begin(), fields.end(), out.begin());
  GcmCipher cipher(key.key, GcmCipher::Mode::kEncrypt);
  const Status status = cipher.encrypt(piece_nonce(key, 0, 0), fields, {}, {},
                                       std::span<uint8_t, kTagBytes>(out.data() + kHelloSignedBytes, kTagBytes));
  TS_CHECK(status.ok(), status.to_string());
  return out;
}

Result<Hello> peek_hello(std::span<const uint8_t> wire) {
  if (wire.size() != kHelloBytes)
    return Status::invalid_input(concat("hello length: got ", wire.size(), " bytes, expected ", kHelloBytes,
                                        " (truncated hello, or not a tessera data connection)"));
  if (!std::equal(std::begin(kHelloMagic), std::end(kHelloMagic), wire.begin()))
    return Status::invalid_input("hello magic: expected \"TSH\" (not a tessera data connection)");
  TS_RETURN_IF_ERROR(expect_field("layout", wire::get_u8(wire, 3), kHelloLayout, "peer speaks another hello layout"));
  const uint32_t flags = wire::get_u32(wire, 4);
  if ((flags & ~kHelloKnownFlags) != 0)
    return Status::invalid_input(concat("hello flags: got 0x", std::hex, flags, ", known 0x", kHelloKnownFlags,
                                        " (peer speaks a newer protocol)"));
  Hello hello;
  hello.plain = (flags & kHelloFlagPlain) != 0;
  hello.sender = wire::get_u32(wire, 8);
  hello.receiver = wire::get_u32(wire, 12);
  hello.generation = wire::get_u64(wire, 16);
  return hello;
}

// One guard per line (tests/seal/hello_test.cpp removes each in turn).
Status open_hello(const Secret& secret, const Hello& expected, std::span<const uint8_t> wire) {
  TS_ASSIGN_OR_RETURN(const Hello got, peek_hello(wire));
  TS_RETURN_IF_ERROR(expect_field("sender", got.sender, expected.sender, "connection from the wrong rank"));
  TS_RETURN_IF_ERROR(expect_field("receiver", got.receiver, expected.receiver, "connection meant for another rank"));
  TS_RETURN_IF_ERROR(
      expect_field("generation", got.generation, expected.generation,
                   got.generation < expected.generation ? "stale generation" : "peer on a newer generation"));
  TS_RETURN_IF_ERROR(expect_field("plain", got.plain, expected.plain, "peers disagree on plain mode"));

  const DirectionKey key = hello_key(secret, expected);
  GcmCipher cipher(key.key, GcmCipher::Mode::kDecrypt);
  // Associated data from the expectation (equal to wire bytes 0..23 once the fields matched).
  const std::vector<uint8_t> fields = encode_fields(expected);
  if (!cipher.decrypt(piece_nonce(key, 0, 0), fields, {}, wire.subspan(kHelloSignedBytes).first<kTagBytes>(), {}))
    return Status::invalid_input(concat("hello authentication failed (tag or fields altered, or another secret): rank ",
                                        expected.sender, " -> rank ", expected.receiver, " generation ",
                                        expected.generation));
  return {};
}

}  // namespace tessera::seal
