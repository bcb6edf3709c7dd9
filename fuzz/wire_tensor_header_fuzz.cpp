// libFuzzer target for decode_tensor_header against receiver limits
// (src/wire/tensor_codec.h, limits.h). Input: one byte choosing a limit set from
// fuzz/wire_fuzz_limits.h, then the header bytes. A refused header must be
// kInvalidInput; an accepted one must keep every promise of its limits (checked
// again from the fields) and re-encode to the same bytes.
// Seeds: fuzz/corpus/wire_tensor_header_fuzz (fuzz/make_wire_corpus.cpp).
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire_fuzz_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::wire;
  static const std::vector<DecodeLimits> sets = fuzz::header_limit_sets();
  if (size < 1) return 0;
  const DecodeLimits& limits = sets[data[0] % sets.size()];
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  const tessera::Result<TensorHeader> header = decode_tensor_header(bytes, limits);
  if (!header.ok()) {
    fuzz::check_refusal(header.status());
    return 0;
  }
  fuzz::check_accepted_header(*header, limits);
  const std::vector<uint8_t> again =
      encode_tensor_header(header->encoding, header->shape.view(), header->payload_bytes);
  TS_CHECK(std::equal(again.begin(), again.end(), bytes.begin(), bytes.end()), "re-encoded header differs");
  return 0;
}
