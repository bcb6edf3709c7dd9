// libFuzzer target for layer reassembly (src/wire/layer_payload.h). Input: a
// sequence of kLayerChunk frames, fed in order to one LayerAssembler. A refusal
// must be kInvalidInput; a finished layer is exactly original_bytes long and
// never above max_layer_bytes, and nothing is ever held above the limits.
// Seeds: fuzz/corpus/wire_layer_fuzz (fuzz/make_wire_corpus.cpp).
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire_fuzz_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::wire;
  static const LayerLimits limits = fuzz::layer_limits();
  std::span<const uint8_t> rest(data, size);
  LayerAssembler assembler(limits);
  uint64_t original_bytes = 0;
  bool started = false;
  while (rest.size() >= kFramePrefixBytes) {
    const tessera::Result<FramePrefix> prefix = decode_frame_prefix(rest, fuzz::frame_limits());
    if (!prefix.ok()) return 0;
    const uint64_t n = kFramePrefixBytes + prefix->header_bytes + prefix->payload_bytes;
    if (n > rest.size() || prefix->kind != MessageKind::kLayerChunk) return 0;
    const tessera::Result<Frame> frame = decode_frame(rest.first(n), fuzz::frame_limits());
    TS_CHECK(frame.ok(), frame.status().to_string());
    rest = rest.subspan(n);
    const tessera::Status status = assembler.add_chunk(frame->header, frame->payload);
    if (!status.ok()) {
      fuzz::check_refusal(status);
      return 0;
    }
    started = true;
    original_bytes = get_u64(frame->header, 8);
    TS_CHECK_LE(original_bytes, limits.max_layer_bytes);
    TS_CHECK_LE(assembler.received_bytes(), lz4_compress_bound(limits.max_layer_bytes));
  }
  if (!started) return 0;
  if (!assembler.complete()) {
    fuzz::check_refusal(assembler.finish().status());
    return 0;
  }
  const tessera::Result<std::vector<uint8_t>> layer = assembler.finish();
  if (!layer.ok()) {
    fuzz::check_refusal(layer.status());
    return 0;
  }
  TS_CHECK_EQ(layer->size(), original_bytes);
  return 0;
}
