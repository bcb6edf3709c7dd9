// libFuzzer target for what peers say on control channels (src/dist): the
// Group's 16-byte control header, then the input as a wire frame holding a
// pipeline control message, read as each message type a receiver reads:
// fields, a start message (sampling parameters, prompt) and a weight-shipping
// manifest. Any input is either accepted or refused with kInvalidInput; none
// may crash, throw or allocate beyond the receiver's bounds. Seeds:
// fuzz/corpus/dist_control_fuzz (fuzz/make_dist_corpus.cpp).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/check.h"
#include "dist/control.h"
#include "dist/control_frame.h"
#include "dist/start_message.h"
#include "dist/weight_shipping.h"

namespace {

void expect_refusal_or_ok(const tessera::Status& status) {
  TS_CHECK(status.ok() || status.kind() == tessera::ErrorKind::kInvalidInput, status.to_string());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::dist;
  const std::span<const uint8_t> input(data, size);
  if (size >= kControlHeaderBytes) {
    expect_refusal_or_ok(decode_control_header(input.first<kControlHeaderBytes>()).status());
  }
  const Result<wire::Frame> frame = wire::decode_frame(input, {0, kMaxControlBytes});
  if (!frame.ok()) return 0;
  const Result<nlohmann::json> message = decode_control(*frame);
  expect_refusal_or_ok(message.status());
  if (!message.ok()) return 0;
  expect_refusal_or_ok(field<uint64_t>(*message, "session").status());
  expect_refusal_or_ok(field<std::string>(*message, "model").status());
  expect_refusal_or_ok(field<bool>(*message, "plain").status());
  (void)text_or(*message, "message", "?");
  expect_refusal_or_ok(sampling_from_json(*message, 1000).status());
  expect_refusal_or_ok(prompt_from_json(*message, 1000).status());
  if (message->contains("ship")) expect_refusal_or_ok(check_manifest((*message)["ship"], 1 << 20).status());
  return 0;
}
