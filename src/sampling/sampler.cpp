#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tessera {

Status validate(const SamplingParams& p, int64_t vocab_size) {
  auto bad = [](const std::string& what) { return Status::invalid_input("sampling: " + what); };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return bad("temperature must be >= 0");
  if (p.top_k < 0) return bad("top_k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    return bad("repetition_penalty must be > 0");
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
    return bad("presence_penalty and frequency_penalty must be finite");
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab_size)
      return bad("logit_bias token " + std::to_string(id) + " is outside [0, " + std::to_string(vocab_size) + ")");
    if (std::isnan(bias)) return bad("logit_bias of token " + std::to_string(id) + " is NaN");
  }
  return {};
}

Sampler::Sampler(SamplingParams params, int64_t vocab_size)
    : params_(std::move(params)), vocab_size_(vocab_size), rng_(params_.seed) {}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> prompt,
                              std::span<const int32_t> output) {
  if (params_.repetition_penalty != 1.0f) {
    counts_.assign(static_cast<size_t>(vocab_size_), 0);
    for (auto tokens : {prompt, output})
      for (const int32_t id : tokens) counts_[static_cast<size_t>(id)] = 1;
    for (size_t id = 0; id < counts_.size(); ++id) {
      if (!counts_[id]) continue;
      float& l = logits[id];
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    counts_.assign(static_cast<size_t>(vocab_size_), 0);
    for (const int32_t id : output) ++counts_[static_cast<size_t>(id)];
    for (size_t id = 0; id < counts_.size(); ++id)
      if (counts_[id])
        logits[id] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(counts_[id]);
  }
}

void Sampler::skip(uint64_t samples) {
  if (params_.temperature == 0.0f) return;
  // The distribution sample() draws with: the generator's outputs a draw takes do not depend on its bounds.
  for (uint64_t i = 0; i < samples; ++i) (void)std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

bool Sampler::plain_greedy() const {
  return params_.temperature == 0.0f && params_.logit_bias.empty() && params_.repetition_penalty == 1.0f &&
         params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output) {
  for (const auto& [id, bias] : params_.logit_bias) logits[static_cast<size_t>(id)] += bias;
  apply_penalties(logits, prompt, output);
  const auto argmax = [&] {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  if (params_.temperature == 0.0f) return argmax();

  // Softmax of logits / temperature over every token, then the filters on the sorted probabilities.
  const float max_logit = logits[static_cast<size_t>(argmax())];
  candidates_.clear();
  for (size_t id = 0; id < logits.size(); ++id) {
    const float p = std::exp((logits[id] - max_logit) / params_.temperature);
    if (p > 0.0f) candidates_.emplace_back(p, static_cast<int32_t>(id));
  }
  if (candidates_.empty()) {  // every logit is -inf: nothing to draw from (the draw is taken all the same: skip())
    (void)std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
    return argmax();
  }
  auto by_probability = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep), candidates_.end(),
                      by_probability);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_probability);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
  if (params_.top_p < 1.0f) {  // the smallest prefix whose probability reaches top_p
    double cumulative = 0;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += candidates_[i].first / total;
      if (cumulative >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {  // tokens at least min_p times as likely as the most likely one
    const float floor = params_.min_p * candidates_[0].first;
    while (keep > 1 && candidates_[keep - 1].first < floor) --keep;
  }
  total = 0;
  for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
  double draw = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (size_t i = 0; i < keep; ++i) {
    draw -= candidates_[i].first;
    if (draw < 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace tessera
