// ArchSpec: one model family's decoder layer, stated as data. Forward asks it
// what each layer does (norm placement, activation, rope style, attention
// window, biases, q/k norm); the weight binder (weights.cpp, random_weights.cpp)
// asks it which tensors a layer has and under which names. Nothing outside
// arch/ names a family.
//
// Adding a family:
//   1. Write arch/<family>.cpp. Open it with a comment naming the transformers
//      class and what differs from Llama. Its `<family>_arch(config)` reads the
//      family's own config.json fields from config.fields() with the
//      read_config_* helpers of io/model_config.h (so errors name the field),
//      reads hidden_act with read_activation, and fills an ArchSpec.
//   2. Declare it below, add one line to kFamilies in arch/registry.cpp and the
//      file to tessera_model in src/CMakeLists.txt.
//   3. Only for an operation nobody has yet (a new activation, norm placement or
//      rope style): add the enumerator here, the kernel to every Device
//      (backend/), and the branch to Forward.
//   Prove it with a fixture made by transformers (tests/fixtures/models).
//
// A value type; immutable once made. Share it between threads freely.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "io/model_config.h"

namespace tessera {

// Where RMSNorm sits around each block: kPre is x + block(norm(x)) (Llama);
// kSandwich is x + post_norm(block(norm(x))) (GLM-4, Gemma 3).
enum class NormPlacement { kPre, kSandwich };
// The MLP's gate: down(act(gate(x)) * up(x)); kSilu is SwiGLU, kGeluTanh GELU's
// tanh approximation (gelu_pytorch_tanh, Gemma).
enum class Activation { kSilu, kGeluTanh };
// Which dimensions rotary embeddings rotate together: kRotateHalf pairs i with
// i + rotary_dim / 2 (transformers' rotate_half); kInterleaved pairs 2i with
// 2i + 1 (GLM).
enum class RopeStyle { kRotateHalf, kInterleaved };

// How a mixture-of-experts layer picks each token's experts from the router's
// logits. Among equal scores the lower expert (or group) index wins.
//   kSoftmaxTopK: softmax over all experts, the top_k largest, their
//     probabilities as weights, divided by their sum when norm_topk_prob
//     (Mixtral always; Qwen3-MoE by its config).
//   kSigmoidGroupTopK (GLM-4.5; DeepSeek-V3's noaux_tc): scores = sigmoid(logits);
//     the choice uses scores + the router's correction bias: each of `groups`
//     equal groups scores the sum of its two best, the `top_groups` best groups
//     stay, the others' experts score 0 (not -inf: transformers' masked_fill),
//     and the top_k experts win. Their weights are the uncorrected scores,
//     divided by (their sum + 1e-20) when norm_topk_prob.
// Every weight is then multiplied by MoeSpec::scaling.
enum class Routing { kSoftmaxTopK, kSigmoidGroupTopK };

// A mixture of experts in place of the dense MLP (arch/moe_config.cpp reads it).
// Each expert is a SwiGLU MLP of `intermediate` (gate, up [intermediate, hidden],
// down [hidden, intermediate]); a token's MLP output is the sum over its top_k
// experts, in ascending expert order, of weight * expert(x).
struct MoeSpec {
  int64_t experts = 0;  // 0: no layer has experts
  int64_t top_k = 0;
  int64_t intermediate = 0;
  Routing routing = Routing::kSoftmaxTopK;
  bool norm_topk_prob = true;
  // Which layers have experts: layer l does when (l + 1) % sparse_step == 0 and
  // l is not in dense_layers (Qwen3-MoE's decoder_sparse_step and mlp_only_layers).
  int64_t sparse_step = 1;
  std::vector<int64_t> dense_layers{};
  // kSigmoidGroupTopK's groups (n_group) and how many of them a token keeps (topk_group).
  int64_t groups = 1;
  int64_t top_groups = 1;
  // routed_scaling_factor: every routed expert's weight is multiplied by it.
  float scaling = 1.0f;
  // > 0: a shared expert of this width (n_shared_experts x moe_intermediate_size),
  // a SwiGLU MLP every token passes through, its output added after the routed
  // experts' sum (GLM-4.5).
  int64_t shared_intermediate = 0;
};

// Names of a layer's tensors after "<prefix>layers.<i>." (Hugging Face's Llama
// names by default). Projections are module names: ".weight" and ".bias" follow.
struct LayerTensorNames {
  std::string attn_norm = "input_layernorm.weight";
  std::string q_proj = "self_attn.q_proj";
  std::string k_proj = "self_attn.k_proj";
  std::string v_proj = "self_attn.v_proj";
  std::string o_proj = "self_attn.o_proj";
  std::string q_norm = "self_attn.q_norm.weight";
  std::string k_norm = "self_attn.k_norm.weight";
  std::string ffn_norm = "post_attention_layernorm.weight";
  // NormPlacement::kSandwich: the norms of each block's output.
  std::string post_attn_norm = "post_self_attn_layernorm.weight";
  std::string post_ffn_norm = "post_mlp_layernorm.weight";
  // Fused projections (ArchSpec::fused_qkv, fused_gate_up).
  std::string qkv_proj = "self_attn.qkv_proj";
  std::string gate_up_proj = "mlp.gate_up_proj";
  std::string gate_proj = "mlp.gate_proj";
  std::string up_proj = "mlp.up_proj";
  std::string down_proj = "mlp.down_proj";
  // Mixture of experts: the router's weight [experts, hidden], and expert e's
  // projections "<experts><e>.<expert_gate|up|down>.weight".
  std::string router = "mlp.gate.weight";
  std::string experts = "mlp.experts.";
  std::string expert_gate = "gate_proj";
  std::string expert_up = "up_proj";
  std::string expert_down = "down_proj";
  // kSigmoidGroupTopK's correction bias [experts], and the shared expert's
  // projections "<shared_expert><expert_gate|up|down>.weight".
  std::string router_bias = "mlp.gate.e_score_correction_bias";
  std::string shared_expert = "mlp.shared_experts.";
};

struct ArchSpec {
  std::string family;  // the model_type it was made for
  NormPlacement norm = NormPlacement::kPre;
  Activation activation = Activation::kSilu;
  RopeStyle rope = RopeStyle::kRotateHalf;
  bool qkv_bias = false;  // q, k, v projections have biases
  bool o_bias = false;    // the output projection has a bias
  bool mlp_bias = false;  // gate, up and down projections have biases
  bool qk_norm = false;   // RMSNorm over each head of q and k before rotary (Qwen3)
  // One qkv_proj [q + 2 kv rows, hidden] in place of q, k, v (Phi-3), and one
  // gate_up_proj [2 intermediate, hidden], gate rows first (Phi-3, GLM-4): the
  // loader splits them into the q, k, v and gate, up views, without copying.
  bool fused_qkv = false;
  bool fused_gate_up = false;
  // The fraction of each head that rotates (the first rotary_dim dimensions).
  double partial_rotary_factor = 1.0;
  // RMSNorm weights act as (norm_offset + w): Gemma stores w - 1.
  float norm_offset = 0.0f;
  // Embeddings multiplied by sqrt(hidden_size), rounded to the weights' dtype (Gemma).
  bool scale_embeddings = false;
  // > 0: attention scores scaled by its ^-0.5 instead of head_dim^-0.5 (Gemma 3).
  double query_pre_attn_scalar = 0;
  // > 0: the final logits soft-capped, cap * tanh(x / cap) (Gemma 3's final_logit_softcapping).
  double final_softcap = 0;
  // The window of windowed layers; 0: none. Read it through window(layer).
  int64_t sliding_window = 0;
  // Which layers are windowed (Gemma 3's layer_types); empty: every layer.
  std::vector<bool> sliding_layers{};
  // The rope of the windowed layers when it differs from config.rope (Gemma 3's local base).
  std::optional<RopeConfig> sliding_rope{};
  MoeSpec moe = {};
  LayerTensorNames names = {};
  // Set when the family's config class decides tie_word_embeddings and config.json
  // (its text_config, for a multimodal wrapper) does not state it: Gemma3TextConfig
  // defaults to true. Model::load and Model::random apply it to the config.
  std::optional<bool> tie_word_embeddings{};

  // Positions a query of `layer` sees: the last window(layer), or all when 0.
  int64_t window(int64_t layer) const {
    return sliding_layers.empty() || sliding_layers.at(static_cast<size_t>(layer)) ? sliding_window : 0;
  }
  // Whether `layer` rotates with sliding_rope.
  bool local_rope(int64_t layer) const { return sliding_rope.has_value() && window(layer) > 0; }
  // The rotating dimensions of a head of head_dim (transformers' int(head_dim * factor)).
  int64_t rotary_dim(int64_t head_dim) const {
    return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  }
  // Whether `layer`'s MLP is a mixture of experts (else the dense MLP).
  bool has_experts(int64_t layer) const;
};

Result<ArchSpec> llama_arch(const ModelConfig& config);
Result<ArchSpec> mistral_arch(const ModelConfig& config);
Result<ArchSpec> qwen2_arch(const ModelConfig& config);
Result<ArchSpec> qwen3_arch(const ModelConfig& config);
Result<ArchSpec> mixtral_arch(const ModelConfig& config);
Result<ArchSpec> qwen3_moe_arch(const ModelConfig& config);
Result<ArchSpec> phi3_arch(const ModelConfig& config);
Result<ArchSpec> glm4_arch(const ModelConfig& config);
Result<ArchSpec> gemma3_arch(const ModelConfig& config);
Result<ArchSpec> glm4_moe_arch(const ModelConfig& config);

// OK when model_type is a supported family, else kUnsupported naming it and the
// supported ones. Pass it to load_model_config so an unknown family is refused
// before the shared fields are read.
Status check_model_type(const std::string& model_type);
// The spec for config.model_type, made by its family from config.fields(), or
// kUnsupported (as check_model_type) or the family's own field errors.
Result<ArchSpec> arch_for(const ModelConfig& config);

// config.json's "hidden_act" (absent: silu), or kUnsupported naming it.
Result<Activation> read_activation(const nlohmann::json& fields);
// partial_rotary_factor, from rope_parameters (transformers 5) or the top level
// (4.x), `fallback` when absent; kInvalidInput naming it unless the rotating
// dimensions of a head are an even number in [2, head_dim].
Result<double> read_partial_rotary(const ModelConfig& config, double fallback);
// The experts' shared fields: the count (`num_local_experts`, or `num_experts`
// as Qwen's published configs name it), `num_experts_per_tok` (at most the
// count), `scoring_func` / `topk_method` when present (only softmax routing is
// implemented; anything else is kUnsupported naming the field). The caller sets
// intermediate, norm_topk_prob and the layer pattern.
Result<MoeSpec> read_moe(const nlohmann::json& fields);

}  // namespace tessera
