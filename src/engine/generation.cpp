#include "engine/generation.h"

#include <algorithm>
#include <chrono>

#include "engine/text_stream.h"

namespace tessera {

Result<GenerationResult> generate(SequenceRunner& runner, int64_t vocab_size, const GenerationRequest& request,
                                  const std::function<bool(int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  TS_RETURN_IF_ERROR(validate(request.sampling, vocab_size));
  const auto prompt_size = static_cast<int64_t>(request.prompt.size());
  if (prompt_size == 0) return Status::invalid_input("the prompt is empty");
  if (prompt_size >= runner.capacity())
    return Status::invalid_input("the prompt has " + std::to_string(prompt_size) +
                                 " tokens, more than the context of " + std::to_string(runner.capacity() - 1));
  // Reuse what the runner holds of the prompt; at least the last prompt token runs, for its logits.
  const std::span<const int32_t> held = runner.tokens();
  const auto common = std::mismatch(held.begin(), held.end(), request.prompt.begin(), request.prompt.end()).first;
  const int64_t reuse = std::min<int64_t>(common - held.begin(), prompt_size - 1);
  TS_RETURN_IF_ERROR(runner.truncate(reuse));

  GenerationResult result;
  Sampler sampler(request.sampling, vocab_size);
  const bool sample_here = request.keep_logits || !runner.samples_itself();
  // Runs `feed` (the prompt's uncached part, then the last token); with `sample`
  // yields the next token, sampled here from the logits or by the runner.
  auto run = [&](std::span<const int32_t> feed, bool sample) -> Result<int32_t> {
    if (!sample_here) return runner.run_to_token(feed, request.prompt);
    TS_ASSIGN_OR_RETURN(std::vector<float> logits, runner.run(feed));
    if (request.keep_logits) result.logits.insert(result.logits.end(), logits.begin(), logits.end());
    return sample ? sampler.sample(logits, request.prompt, result.tokens) : -1;
  };
  const auto start = Clock::now();
  TS_ASSIGN_OR_RETURN(int32_t next, run(std::span(request.prompt).subspan(static_cast<size_t>(reuse)), true));
  const auto prefilled = Clock::now();
  result.finish_reason = "length";
  while (static_cast<int64_t>(result.tokens.size()) < request.max_tokens) {
    if (request.cancel && request.cancel->load()) {
      result.finish_reason = "cancelled";
      break;
    }
    if (std::find(request.stop_ids.begin(), request.stop_ids.end(), next) != request.stop_ids.end()) {
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(next);
    if (!on_token(next)) {
      result.finish_reason = "stop";
      break;
    }
    if (runner.length() >= runner.capacity()) break;
    const bool last = static_cast<int64_t>(result.tokens.size()) == request.max_tokens;
    if (last && !request.keep_logits) break;
    TS_ASSIGN_OR_RETURN(next, run(std::span(&result.tokens.back(), 1), !last));  // the last run only scores
  }
  result.prefill_seconds = std::chrono::duration<double>(prefilled - start).count();
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - prefilled).count();
  return result;
}

Result<GenerationResult> generate_text(const TextModel& model, SequenceRunner& runner, GenerationRequest request,
                                       const std::function<void(std::string_view)>& on_text) {
  request.stop_ids = model.stop_ids;
  TextStream stream(
      [&](std::span<const int32_t> ids) { return model.tokenizer.decode(ids, /*skip_special=*/true).value_or(""); },
      request.stop_strings);
  auto result = generate(runner, model.model.config().vocab_size, request, [&](int32_t token) {
    if (const std::string piece = stream.push(token); !piece.empty()) on_text(piece);
    return !stream.stopped();
  });
  if (const std::string rest = stream.finish(); !rest.empty()) on_text(rest);
  return result;
}

}  // namespace tessera
