#include "engine/generation.h"

#include <algorithm>
#include <chrono>

#include "engine/text_stream.h"

namespace tessera {

Result<GenerationResult> generate_text(const TextModel& model, SequenceRunner& runner, const GenerationRequest& request,
                                       const std::function<void(std::string_view)>& on_text) {
  using Clock = std::chrono::steady_clock;
  const int64_t vocab = model.model.config().vocab_size;
  TS_RETURN_IF_ERROR(validate(request.sampling, vocab));
  const auto prompt_size = static_cast<int64_t>(request.prompt.size());
  if (prompt_size == 0) return Status::invalid_input("the prompt is empty");
  if (prompt_size >= runner.capacity())
    return Status::invalid_input("the prompt has " + std::to_string(prompt_size) +
                                 " tokens, more than the context of " + std::to_string(runner.capacity() - 1));
  // Reuse the cached prefix; at least the last prompt token runs, for its logits.
  const int64_t reuse = std::min(runner.length(), prompt_size - 1);
  TS_RETURN_IF_ERROR(runner.truncate(reuse));

  GenerationResult result;
  Sampler sampler(request.sampling, vocab);
  TextStream stream(
      [&](std::span<const int32_t> ids) { return model.tokenizer.decode(ids, /*skip_special=*/true).value_or(""); },
      request.stop_strings);
  // Each step runs `feed` (the prompt's uncached part, then the last token) and
  // yields the next token: sampled here from the logits, or where the logits
  // are when the runner samples remotely (a pipeline's last stage).
  auto next_token = [&](std::span<const int32_t> feed) -> Result<int32_t> {
    if (runner.samples_remotely()) return runner.run_to_token(feed, request.prompt);
    TS_ASSIGN_OR_RETURN(std::vector<float> logits, runner.run(feed));
    return sampler.sample(logits, request.prompt, result.tokens);
  };
  const auto start = Clock::now();
  TS_ASSIGN_OR_RETURN(int32_t next, next_token(std::span(request.prompt).subspan(static_cast<size_t>(reuse))));
  const auto prefilled = Clock::now();
  result.finish_reason = "length";
  while (static_cast<int64_t>(result.tokens.size()) < request.max_tokens) {
    if (request.cancel && request.cancel->load()) {
      result.finish_reason = "cancelled";
      break;
    }
    if (std::binary_search(model.stop_ids.begin(), model.stop_ids.end(), next)) {
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(next);
    if (const std::string piece = stream.push(next); !piece.empty()) on_text(piece);
    if (stream.stopped()) {
      result.finish_reason = "stop";
      break;
    }
    if (runner.length() >= runner.capacity() || static_cast<int64_t>(result.tokens.size()) == request.max_tokens) break;
    TS_ASSIGN_OR_RETURN(next, next_token(std::span(&result.tokens.back(), 1)));
  }
  if (const std::string rest = stream.finish(); !rest.empty()) on_text(rest);
  result.prefill_seconds = std::chrono::duration<double>(prefilled - start).count();
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - prefilled).count();
  return result;
}

}  // namespace tessera
