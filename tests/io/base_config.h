// The smallest valid Llama config.json, as JSON, for tests that vary one field
// of it (io/model_config_test.cpp, model/arch_test.cpp).
#pragma once

#include <nlohmann/json.hpp>

namespace tessera::testing {

inline nlohmann::json base_config() {
  return nlohmann::json{{"model_type", "llama"},    {"vocab_size", 512},
                        {"hidden_size", 64},        {"intermediate_size", 160},
                        {"num_hidden_layers", 2},   {"num_attention_heads", 4},
                        {"num_key_value_heads", 2}, {"max_position_embeddings", 256},
                        {"rms_norm_eps", 1e-5},     {"hidden_act", "silu"}};
}

}  // namespace tessera::testing
