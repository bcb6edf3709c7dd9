// libFuzzer target for the int8/int4 path: whole kTensor frames decoded with
// limits that allow INT8, INT4 and LZ4 (src/wire/tensor_codec.h, quant.h). A
// refusal must be kInvalidInput; an accepted frame decodes to exactly
// decoded_bytes, and an unflagged or int8 payload re-decodes identically.
// Seeds: fuzz/corpus/wire_quant_fuzz (fuzz/make_wire_corpus.cpp).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "wire_fuzz_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::wire;
  static const DecodeLimits limits = fuzz::quant_limits();
  std::vector<uint8_t> scratch;
  const auto decoded = fuzz::decode_checked({data, size}, limits, scratch);
  if (!decoded) return 0;
  const auto& [frame, tensor] = *decoded;
  // Decoding is deterministic: the two-step API gives the same bytes.
  std::vector<uint8_t> out(tensor.header.decoded_bytes);
  TS_CHECK(decode_tensor_payload(tensor.header, frame.payload, out, limits).ok());
  TS_CHECK(out.empty() || std::memcmp(out.data(), tensor.bytes.data(), out.size()) == 0, "decode differs");
  return 0;
}
