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
  const tessera::Result<Frame> frame = decode_frame({data, size}, fuzz::frame_limits());
  if (!frame.ok()) return 0;  // wire_frame_fuzz covers framing
  std::vector<uint8_t> scratch;
  const tessera::Result<DecodedTensor> tensor = decode_tensor(*frame, limits, scratch);
  if (!tensor.ok()) {
    fuzz::check_refusal(tensor.status());
    TS_CHECK_LE(scratch.capacity(), limits.max_decoded_bytes);
    return 0;
  }
  fuzz::check_accepted_header(tensor->header, limits);
  TS_CHECK_EQ(tensor->bytes.size(), tensor->header.decoded_bytes);
  // Decoding is deterministic: the two-step API gives the same bytes.
  std::vector<uint8_t> out(tensor->header.decoded_bytes);
  TS_CHECK(decode_tensor_payload(tensor->header, frame->payload, out, limits).ok());
  TS_CHECK(out.empty() || std::memcmp(out.data(), tensor->bytes.data(), out.size()) == 0, "decode differs");
  return 0;
}
