// libFuzzer target for the step message a tensor-parallel follower receives from
// its leader (wire/tp_step.h): the first 32 bytes as the header, the rest as the
// body, under small receiver limits, once as a rank that takes token ids and
// once as one that takes hidden states (a TP stage past layer 0). Any input is either accepted or refused
// with kInvalidInput; none may crash, throw or allocate beyond the limits, and
// an accepted step holds only what the limits allow. Seeds:
// fuzz/corpus/wire_tp_step_fuzz (fuzz/make_tp_step_corpus.py).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/check.h"
#include "wire/tp_step.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::wire;
  if (size < kTpStepHeaderBytes) return 0;
  const std::span<const uint8_t> input(data, size);
  for (const uint32_t hidden_size : {0u, 8u}) {
    const TpStepLimits limits{
        .max_tokens = 64, .blocks = 16, .block_size = 4, .vocab = 100, .hidden_size = hidden_size};
    const Result<TpStepHeader> header = decode_tp_step_header(input.first(kTpStepHeaderBytes), limits);
    TS_CHECK(header.ok() || header.status().kind() == ErrorKind::kInvalidInput, header.status().to_string());
    if (!header.ok() || header->kind == TpStepKind::kStop) continue;
    TS_CHECK(header->body_bytes() <= kMaxTpStepBodyBytes, header->body_bytes());
    TS_CHECK((header->input == TpStepInput::kHidden) == (hidden_size > 0), hidden_size);
    TS_CHECK(header->hidden_bytes(hidden_size) == (hidden_size > 0 ? header->tokens * hidden_size * 4u : 0u),
             header->hidden_bytes(hidden_size));
    const Result<TpStep> step = decode_tp_step_body(*header, input.subspan(kTpStepHeaderBytes), limits);
    TS_CHECK(step.ok() || step.status().kind() == ErrorKind::kInvalidInput, step.status().to_string());
    if (!step.ok()) continue;
    TS_CHECK(step->ids.size() == (hidden_size > 0 ? 0u : header->tokens), step->ids.size());
    int64_t tokens = 0;
    for (const int32_t id : step->ids) TS_CHECK(id >= 0 && id < 100, id);
    for (const TpStepPart& part : step->parts) {
      TS_CHECK(part.tokens >= 1 && part.pos0 >= 0, part.tokens, " ", part.pos0);
      TS_CHECK(static_cast<int64_t>(part.blocks.size()) * 4 >= part.pos0 + part.tokens, part.blocks.size());
      for (const int32_t block : part.blocks) TS_CHECK(block >= 0 && block < 16, block);
      tokens += part.tokens;
    }
    TS_CHECK(tokens == static_cast<int64_t>(header->tokens), tokens);
    for (const auto& [from, to] : step->copies) TS_CHECK(from != to && from >= 0 && to < 16, from, " ", to);
  }
  return 0;
}
