// libFuzzer target for the frame codec (src/wire/frame.h). Any input is either
// refused with kInvalidInput or is exactly one frame whose spans lie inside the
// input, whose prefix decodes alone to the same fields, and which re-encodes to
// the same bytes. Seeds: fuzz/corpus/wire_frame_fuzz (fuzz/make_wire_corpus.cpp).
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire_fuzz_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::wire;
  const std::span<const uint8_t> input(data, size);
  const tessera::Result<Frame> frame = decode_frame(input, fuzz::frame_limits());
  if (!frame.ok()) {
    fuzz::check_refusal(frame.status());
    return 0;
  }
  const FramePrefix& p = frame->prefix;
  TS_CHECK_LE(p.header_bytes, fuzz::frame_limits().max_header_bytes);
  TS_CHECK_LE(p.payload_bytes, fuzz::frame_limits().max_payload_bytes);
  TS_CHECK(frame->header.data() == data + kFramePrefixBytes && frame->header.size() == p.header_bytes);
  TS_CHECK(frame->payload.data() == data + kFramePrefixBytes + p.header_bytes &&
           frame->payload.size() == p.payload_bytes);
  TS_CHECK_EQ(size, kFramePrefixBytes + p.header_bytes + p.payload_bytes);

  const tessera::Result<FramePrefix> alone = decode_frame_prefix(input.first(kFramePrefixBytes), fuzz::frame_limits());
  TS_CHECK(alone.ok(), alone.status().to_string());
  TS_CHECK(alone->kind == p.kind && alone->request_id == p.request_id && alone->payload_bytes == p.payload_bytes);

  std::vector<uint8_t> again;
  append_frame_prefix(again, p);
  again.insert(again.end(), frame->header.begin(), frame->header.end());
  again.insert(again.end(), frame->payload.begin(), frame->payload.end());
  TS_CHECK(std::equal(again.begin(), again.end(), input.begin(), input.end()), "re-encoded frame differs");
  return 0;
}
