// The sampling flags shared by `tessera generate` and `tessera chat`.
#pragma once

#include <CLI/CLI.hpp>
#include <climits>
#include <cmath>

#include "sampling/sampler.h"

namespace tessera {

inline void add_sampling_options(CLI::App& cmd, SamplingParams& p) {
  cmd.add_option("--temperature", p.temperature, "Sampling temperature; 0 (default) is greedy");
  cmd.add_option("--top-k", p.top_k, "Keep the k most likely tokens (0: off)");
  cmd.add_option("--top-p", p.top_p, "Keep the smallest set of tokens whose probability reaches p (1: off)");
  cmd.add_option("--min-p", p.min_p, "Drop tokens less likely than min-p times the most likely (0: off)");
  cmd.add_option("--repetition-penalty", p.repetition_penalty, "transformers' repetition penalty (1: off)");
  cmd.add_option("--presence-penalty", p.presence_penalty, "OpenAI presence penalty (0: off)");
  cmd.add_option("--frequency-penalty", p.frequency_penalty, "OpenAI frequency penalty (0: off)");
  cmd.add_option_function<std::vector<double>>(
         "--logit-bias",
         [&p](const std::vector<double>& pairs) {
           if (pairs.size() % 2 != 0) throw CLI::ValidationError("--logit-bias", "takes pairs: token id, bias");
           for (size_t i = 0; i < pairs.size(); i += 2) {
             // A token id is a whole number in int32's range: 5.7 or 2^32 + 5 is refused, never cut to 5.
             const double id = pairs[i];
             if (!(id >= 0 && id <= INT32_MAX && id == std::floor(id)))
               throw CLI::ValidationError("--logit-bias",
                                          "token id " + std::to_string(id) + " is not a whole number in [0, 2^31)");
             p.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(pairs[i + 1]);
           }
         },
         "Pairs of token id and bias added to its logit, e.g. --logit-bias 42 -100")
      ->expected(2, -1);
  cmd.add_option("--seed", p.seed, "Seed of the sampler (same seed, same tokens)");
}

}  // namespace tessera
