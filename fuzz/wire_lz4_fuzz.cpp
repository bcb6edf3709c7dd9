// libFuzzer target for the LZ4 path: whole kTensor frames decoded with limits
// that allow LZ4 (src/wire/tensor_codec.h, lz4_codec.h). A refusal must be
// kInvalidInput; an accepted frame must decode to exactly decoded_bytes, into a
// buffer no larger than the limits allow, and a plain frame must be borrowed.
// Seeds: fuzz/corpus/wire_lz4_fuzz (fuzz/make_wire_corpus.cpp).
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire_fuzz_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::wire;
  static const DecodeLimits limits = fuzz::lz4_limits();
  std::vector<uint8_t> scratch;
  const auto decoded = fuzz::decode_checked({data, size}, limits, scratch);
  if (!decoded) return 0;
  const auto& [frame, tensor] = *decoded;
  if (tensor.header.encoding.flags == 0) {
    TS_CHECK(tensor.bytes.data() == frame.payload.data(), "plain payload was copied");
  } else {
    // Recompressing the decoded bytes must give a frame that decodes to them again.
    const std::vector<uint8_t> block = lz4_compress(tensor.bytes);
    std::vector<uint8_t> out(tensor.bytes.size());
    TS_CHECK(lz4_decompress_exact("again", block, out).ok());
    TS_CHECK(std::equal(out.begin(), out.end(), tensor.bytes.begin(), tensor.bytes.end()));
  }
  return 0;
}
