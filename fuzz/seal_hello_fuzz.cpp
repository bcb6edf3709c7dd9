// libFuzzer target for the connection hello (src/seal/hello.h): peek_hello,
// then open_hello against the fixed secret, both with the peeked fields (as a
// receiver that looks the session up by them) and with the fixed expectation.
// Any input is refused with kInvalidInput or opens; an input that opens is
// exactly seal_hello of its fields. Seeds: fuzz/corpus/seal_hello_fuzz
// (fuzz/make_seal_corpus.cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/check.h"
#include "seal_fuzz_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::seal;
  const std::span<const uint8_t> input(data, size);
  static const Secret secret = fuzz::fuzz_secret();

  const Result<Hello> peeked = peek_hello(input);
  const Status fixed = open_hello(secret, fuzz::expected_hello(), input);
  if (!peeked.ok()) {
    TS_CHECK(peeked.status().kind() == ErrorKind::kInvalidInput, peeked.status().to_string());
    TS_CHECK(!fixed.ok() && fixed.kind() == ErrorKind::kInvalidInput, fixed.to_string());
    return 0;
  }
  TS_CHECK_EQ(size, kHelloBytes);
  const Status status = open_hello(secret, *peeked, input);
  if (!status.ok()) {
    TS_CHECK(status.kind() == ErrorKind::kInvalidInput, status.to_string());
    TS_CHECK(!fixed.ok() && fixed.kind() == ErrorKind::kInvalidInput, fixed.to_string());
    return 0;
  }
  const std::array<uint8_t, kHelloBytes> again = seal_hello(secret, *peeked);
  TS_CHECK(std::equal(again.begin(), again.end(), input.begin(), input.end()), "re-sealed hello differs");
  const Hello& e = fuzz::expected_hello();
  const bool matches = peeked->sender == e.sender && peeked->receiver == e.receiver &&
                       peeked->generation == e.generation && peeked->plain == e.plain;
  TS_CHECK(fixed.ok() == matches, fixed.to_string());
  return 0;
}
