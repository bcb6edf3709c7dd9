// libFuzzer target for what peers say on control channels (the control codecs
// of src/wire): a group's 16-byte rank control header (rank_control.h), then
// the input as a wire frame holding a pipeline control message
// (control_frame.h), read as each message type a receiver reads: fields, a
// stage's typed error (kind and cause), a start message (start_message.h:
// sampling parameters, prompt) and a weight-shipping manifest (ship_manifest.h;
// an accepted one must keep its promises: bytes, payload dtypes, bound). Any
// input is either accepted or refused with kInvalidInput; none may crash, throw
// or allocate beyond the receiver's bounds. Seeds: fuzz/corpus/wire_control_fuzz
// (fuzz/make_control_corpus.cpp).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/check.h"
#include "wire/control_frame.h"
#include "wire/prefix_message.h"
#include "wire/rank_control.h"
#include "wire/ship_manifest.h"
#include "wire/start_message.h"

namespace {

void expect_refusal_or_ok(const tessera::Status& status) {
  TS_CHECK(status.ok() || status.kind() == tessera::ErrorKind::kInvalidInput, status.to_string());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::wire;
  const std::span<const uint8_t> input(data, size);
  if (size >= kControlHeaderBytes) {
    expect_refusal_or_ok(decode_control_header(input.first<kControlHeaderBytes>()).status());
  }
  const Result<Frame> frame = decode_frame(input, kControlOnly);
  if (!frame.ok()) return 0;
  const Result<nlohmann::json> message = decode_control(*frame);
  expect_refusal_or_ok(message.status());
  if (!message.ok()) return 0;
  expect_refusal_or_ok(field<uint64_t>(*message, "session").status());
  expect_refusal_or_ok(field<std::string>(*message, "model").status());
  expect_refusal_or_ok(field<bool>(*message, "plain").status());
  (void)text_or(*message, "message", "?");
  const Result<ErrorReport> error = error_from_message(*message);  // a stage's error: kind and cause by name
  expect_refusal_or_ok(error.status());
  if (error.ok()) TS_CHECK(!error->status.ok(), "an error message read as OK");
  expect_refusal_or_ok(sampling_from_json(*message).status());
  expect_refusal_or_ok(prompt_from_json(*message, 1000).status());
  const Result<std::vector<int32_t>> output = output_from_json(*message, 1000, 64);  // a preempted request's answer
  expect_refusal_or_ok(output.status());
  if (output.ok()) TS_CHECK(output->size() <= 64, "an output of ", output->size(), " ids passed a bound of 64");
  // The prefix cache's messages (prefix_message.h), as a stage and the coordinator read them.
  expect_refusal_or_ok(digests_from_json(*message, "blocks", 64).status());
  expect_refusal_or_ok(digests_from_json(*message, "names", 64).status());
  expect_refusal_or_ok(prefix_blocks_from_json(*message, 64).status());
  expect_refusal_or_ok(kv_usage_from_heartbeat(*message).status());
  if (!message->contains("ship")) return 0;
  constexpr uint64_t kBound = 1 << 20;
  const auto groups = check_manifest((*message)["ship"], kBound);
  expect_refusal_or_ok(groups.status());
  if (!groups.ok()) return 0;
  // An accepted manifest keeps its promises: every tensor's bytes are its dims' (whole
  // blocks for a quantized dtype), every group has the dtype its payload travels as, and
  // all of it fits the bound.
  uint64_t total = 0;
  for (const auto& group : *groups) {
    std::vector<DType> dtypes;
    for (const ShipTensor& t : group) {
      const std::optional<uint64_t> bytes = tensor_bytes(t.dtype, t.shape);
      TS_CHECK(bytes && *bytes == t.bytes, "ship manifest tensor ", t.name, " bytes");
      total += t.bytes;
      dtypes.push_back(t.dtype);
    }
    TS_CHECK(payload_dtype(dtypes).has_value(), "a group without a payload dtype");
  }
  TS_CHECK(total <= kBound, "ship manifest beyond its bound: ", total);
  return 0;
}
