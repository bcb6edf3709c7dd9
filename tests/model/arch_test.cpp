// The families' own config.json fields and layer variants (model/arch/): each
// family reads its fields from the JSON io keeps, the registry refuses an
// unknown model_type by name, and the spec lists the tensors a layer has.
#include "model/arch/arch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "io/base_config.h"
#include "model/model.h"

namespace tessera {
namespace {

using nlohmann::json;

using testing::base_config;

// The config as Model::load reads it: the registry checks model_type first, then the family reads its fields.
Result<ArchSpec> spec_of(const json& j) {
  TS_ASSIGN_OR_RETURN(const ModelConfig config, parse_model_config(j, check_model_type));
  return arch_for(config);
}

ArchSpec spec_ok(const json& j) {
  auto spec = spec_of(j);
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  return spec.ok() ? spec.value() : ArchSpec{};
}

void expect_error(const json& j, ErrorKind kind, const std::string& needle) {
  auto spec = spec_of(j);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().kind(), kind) << spec.status().to_string();
  EXPECT_NE(spec.status().message().find(needle), std::string::npos) << spec.status().message();
}

json with_type(const std::string& type) {
  json j = base_config();
  j["model_type"] = type;
  return j;
}

// A gemma3_text config stating the shared fields whose Gemma3TextConfig defaults differ.
json gemma3_config() {
  json j = with_type("gemma3_text");
  j["head_dim"] = 16;
  j["rope_theta"] = 1e6;
  return j;
}

TEST(ArchTest, LlamaDefaults) {
  const ArchSpec a = spec_ok(base_config());
  EXPECT_EQ(a.family, "llama");
  EXPECT_EQ(a.norm, NormPlacement::kPre);
  EXPECT_EQ(a.activation, Activation::kSilu);
  EXPECT_EQ(a.rope, RopeStyle::kRotateHalf);
  EXPECT_FALSE(a.qkv_bias || a.o_bias || a.mlp_bias || a.qk_norm);
  EXPECT_EQ(a.window(0), 0);
  EXPECT_EQ(a.window(1), 0);
}

TEST(ArchTest, LlamaReadsItsBiases) {
  json j = base_config();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const ArchSpec a = spec_ok(j);
  EXPECT_TRUE(a.qkv_bias && a.o_bias && a.mlp_bias);
  j["mlp_bias"] = "yes";
  expect_error(j, ErrorKind::kInvalidInput, "'mlp_bias' is not a boolean");
}

TEST(ArchTest, Qwen2HasQkvBiasOnly) {
  const ArchSpec a = spec_ok(with_type("qwen2"));
  EXPECT_TRUE(a.qkv_bias);
  EXPECT_FALSE(a.o_bias || a.mlp_bias || a.qk_norm);
}

TEST(ArchTest, Qwen3HasQkNormAndOptionalBias) {
  json j = with_type("qwen3");
  EXPECT_TRUE(spec_ok(j).qk_norm);
  EXPECT_FALSE(spec_ok(j).qkv_bias);
  j["attention_bias"] = true;
  const ArchSpec a = spec_ok(j);
  EXPECT_TRUE(a.qkv_bias && a.o_bias);
  EXPECT_FALSE(a.mlp_bias);
}

TEST(ArchTest, MistralSlidingWindowOnEveryLayer) {
  json j = with_type("mistral");
  j["sliding_window"] = 4096;
  const ArchSpec a = spec_ok(j);
  EXPECT_EQ(a.window(0), 4096);
  EXPECT_EQ(a.window(1), 4096);
  j["sliding_window"] = 0;
  expect_error(j, ErrorKind::kInvalidInput, "'sliding_window'");
}

TEST(ArchTest, ReadsFamilyFieldsFromNestedTextConfig) {
  json j = {{"model_type", "mistral3"}, {"text_config", base_config()}, {"tie_word_embeddings", true}};
  j["text_config"]["model_type"] = "mistral";
  j["text_config"]["sliding_window"] = 4096;
  const ArchSpec a = spec_ok(j);
  EXPECT_EQ(a.family, "mistral");
  EXPECT_EQ(a.window(0), 4096);
}

TEST(ArchTest, NullSlidingWindowMeansFullAttention) {
  json j = base_config();
  j["model_type"] = "mistral";
  j["sliding_window"] = nullptr;
  EXPECT_EQ(spec_ok(j).window(0), 0);
}

TEST(ArchTest, RefusesUnsupportedModelTypeByName) {
  json j = base_config();
  j["model_type"] = "gemma2";
  expect_error(j, ErrorKind::kUnsupported, "'gemma2'");
  expect_error(j, ErrorKind::kUnsupported,
               "model_type 'gemma2' is not supported (supported: llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, "
               "phi3, glm4, gemma3_text, glm4_moe)");
  j.erase("hidden_size");  // an unknown family is named before any shared field it lacks
  expect_error(j, ErrorKind::kUnsupported, "'gemma2'");
  ModelConfig built;  // a config made in code goes through the same registry
  built.model_type = "gemma2";
  EXPECT_EQ(arch_for(built).status().kind(), ErrorKind::kUnsupported);
}

TEST(ArchTest, RefusesUnsupportedActivation) {
  for (const char* type : {"llama", "mistral", "qwen2", "qwen3"}) {
    json j = with_type(type);
    j["hidden_act"] = "gelu";
    expect_error(j, ErrorKind::kUnsupported, "gelu");
  }
}

TEST(ArchTest, RefusesQwenSlidingWindow) {
  json j = base_config();
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  expect_error(j, ErrorKind::kUnsupported, "use_sliding_window");
  j["model_type"] = "qwen3";
  expect_error(j, ErrorKind::kUnsupported, "use_sliding_window");
}

TEST(ArchTest, LayerTensorsFollowTheSpec) {
  json j = with_type("qwen3");
  j["head_dim"] = 32;
  const ModelConfig config = *parse_model_config(j);
  const auto names = [&](const ArchSpec& spec) {
    std::vector<std::string> out;
    for (const LayerTensor& t : layer_tensors(config, spec, 0)) out.push_back(t.name);
    return out;
  };
  const ArchSpec qwen3 = *arch_for(config);
  const auto tensors = layer_tensors(config, qwen3, 0);
  ASSERT_EQ(tensors.size(), 11u);  // 2 norms, 4 attention, 2 q/k norms, 3 MLP
  EXPECT_EQ(tensors[1].name, "self_attn.q_proj.weight");
  EXPECT_EQ(tensors[1].shape, (std::vector<int64_t>{4 * 32, 64}));
  const auto q_norm = std::find_if(tensors.begin(), tensors.end(),
                                   [](const LayerTensor& t) { return t.name == "self_attn.q_norm.weight"; });
  ASSERT_NE(q_norm, tensors.end());
  EXPECT_TRUE(q_norm->norm);
  EXPECT_EQ(q_norm->shape, std::vector<int64_t>{32});
  ArchSpec biased = qwen3;
  biased.qkv_bias = biased.o_bias = biased.mlp_bias = true;
  EXPECT_EQ(names(biased).size(), 18u);
  ArchSpec renamed = qwen3;
  renamed.names.q_proj = "attn.wq";
  EXPECT_EQ(names(renamed)[1], "attn.wq.weight");
}

TEST(ArchTest, MixtralHasExpertsOnEveryLayerUnderItsNames) {
  json j = with_type("mixtral");
  j["num_local_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["sliding_window"] = 4096;
  const ArchSpec spec = spec_ok(j);
  EXPECT_EQ(spec.moe.experts, 8);
  EXPECT_EQ(spec.moe.top_k, 2);
  EXPECT_EQ(spec.moe.intermediate, j["intermediate_size"].get<int64_t>());
  EXPECT_TRUE(spec.moe.norm_topk_prob);
  EXPECT_EQ(spec.window(0), 4096);
  EXPECT_TRUE(spec.has_experts(0) && spec.has_experts(1));
  const ModelConfig config = *parse_model_config(j);
  const auto tensors = layer_tensors(config, spec, 0);
  ASSERT_EQ(tensors.size(), 2u + 4u + 1u + 8u * 3u);  // norms, attention, router, experts
  EXPECT_EQ(tensors[6].name, "block_sparse_moe.gate.weight");
  EXPECT_EQ(tensors[7].name, "block_sparse_moe.experts.0.w1.weight");
  EXPECT_EQ(tensors.back().name, "block_sparse_moe.experts.7.w2.weight");
}

TEST(ArchTest, Qwen3MoeLayerPatternAndExpertCount) {
  json j = with_type("qwen3_moe");
  j["num_experts"] = 4;  // as Qwen's published configs name it
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  const ArchSpec spec = spec_ok(j);
  EXPECT_EQ(spec.moe.experts, 4);
  EXPECT_EQ(spec.moe.intermediate, 32);
  EXPECT_FALSE(spec.moe.norm_topk_prob);  // transformers' default
  std::vector<bool> experts;
  for (int64_t layer = 0; layer < 6; ++layer) experts.push_back(spec.has_experts(layer));
  EXPECT_EQ(experts, (std::vector<bool>{false, true, false, false, false, true}));
  j["norm_topk_prob"] = true;
  EXPECT_TRUE(spec_ok(j).moe.norm_topk_prob);
}

// Guards: remove the check in read_moe and these run with wrong numbers (or index out of range).
TEST(ArchTest, RefusesRoutingItLacks) {
  json j = with_type("qwen3_moe");
  j["num_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  j["scoring_func"] = "sigmoid";
  expect_error(j, ErrorKind::kUnsupported, "field 'scoring_func' = \"sigmoid\" is not supported");
  j.erase("scoring_func");
  j["topk_method"] = "noaux_tc";
  expect_error(j, ErrorKind::kUnsupported, "field 'topk_method'");
  j.erase("topk_method");
  j["num_experts_per_tok"] = 5;
  expect_error(j, ErrorKind::kInvalidInput, "field 'num_experts_per_tok' = 5 is outside [1, 4]");
  j["num_experts_per_tok"] = 2;
  j["mlp_only_layers"] = {7};
  expect_error(j, ErrorKind::kInvalidInput, "mlp_only_layers");
  j.erase("mlp_only_layers");
  j.erase("moe_intermediate_size");
  expect_error(j, ErrorKind::kInvalidInput, "'moe_intermediate_size' is missing");
}

// The published configs of Mixtral-8x7B and Qwen3-30B-A3B (bench/shapes) read as their checkpoints would.
TEST(ArchTest, PublishedMoeShapesRead) {
  const std::string shapes = std::string(TESSERA_SOURCE_DIR) + "/bench/shapes/";
  auto mixtral = load_model_config_file(shapes + "mixtral-8x7b.json", check_model_type);
  ASSERT_TRUE(mixtral.ok()) << mixtral.status().to_string();
  const ArchSpec m = *arch_for(*mixtral);
  EXPECT_EQ(m.moe.experts, 8);
  EXPECT_EQ(m.moe.top_k, 2);
  EXPECT_EQ(m.moe.intermediate, 14336);
  EXPECT_EQ(m.window(0), 0);
  auto qwen = load_model_config_file(shapes + "qwen3-30b-a3b.json", check_model_type);
  ASSERT_TRUE(qwen.ok()) << qwen.status().to_string();
  const ArchSpec q = *arch_for(*qwen);
  EXPECT_EQ(q.moe.experts, 128);
  EXPECT_EQ(q.moe.top_k, 8);
  EXPECT_EQ(q.moe.intermediate, 768);
  EXPECT_TRUE(q.moe.norm_topk_prob && q.qk_norm && q.has_experts(0) && q.has_experts(47));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Each refusal of the newer families' configs (phi3, glm4, gemma3_text): the
// feature the spec cannot state, named by its field.
TEST(ArchTest, Phi3FusedProjectionsAndLongRope) {
  json j = with_type("phi3");  // head_dim 16: 8 rotary pairs
  j["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", json::array({1, 1, 1, 1, 1, 1, 1, 1})},
                       {"long_factor", json::array({2, 2, 2, 2, 2, 2, 2, 2})}};
  j["original_max_position_embeddings"] = 64;
  j["max_position_embeddings"] = 256;
  const ArchSpec spec = spec_ok(j);
  EXPECT_TRUE(spec.fused_qkv && spec.fused_gate_up);
  const auto config = parse_model_config(j, check_model_type);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->rope.type, RopeType::kLongRope);
  EXPECT_DOUBLE_EQ(config->rope.factor, 4.0);
  EXPECT_DOUBLE_EQ(config->rope.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(64.0)));
  std::vector<std::string> names;
  for (const LayerTensor& t : layer_tensors(*config, spec, 0)) names.push_back(t.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "self_attn.qkv_proj.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "mlp.gate_up_proj.weight"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "self_attn.q_proj.weight"), names.end());

  j["rope_scaling"]["short_factor"] = json::array({1, 1, 1});
  j["rope_scaling"]["long_factor"] = json::array({1, 1, 1});
  expect_error(j, ErrorKind::kInvalidInput, "short_factor");
  j["rope_scaling"].erase("long_factor");
  expect_error(j, ErrorKind::kInvalidInput, "long_factor");
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}};
  expect_error(j, ErrorKind::kUnsupported, "yarn");
}

TEST(ArchTest, Glm4PartialInterleavedRotary) {
  json j = with_type("glm4");
  j["head_dim"] = 24;
  const ArchSpec spec = spec_ok(j);
  EXPECT_EQ(spec.norm, NormPlacement::kSandwich);
  EXPECT_EQ(spec.rope, RopeStyle::kInterleaved);
  EXPECT_EQ(spec.rotary_dim(24), 12);  // partial_rotary_factor defaults to 0.5
  EXPECT_TRUE(spec.qkv_bias && !spec.o_bias && spec.fused_gate_up);
  j["partial_rotary_factor"] = 0.25;  // 6 of 24: three pairs
  EXPECT_EQ(spec_ok(j).rotary_dim(24), 6);
  j["partial_rotary_factor"] = 0.125;  // 3 dimensions: not whole pairs
  expect_error(j, ErrorKind::kInvalidInput, "partial_rotary_factor");
  j["partial_rotary_factor"] = 1.5;
  expect_error(j, ErrorKind::kInvalidInput, "partial_rotary_factor");
}

TEST(ArchTest, Gemma3LayerTypesAndRefusals) {
  json j = gemma3_config();
  j["sliding_window"] = 4;
  j["layer_types"] = {"sliding_attention", "full_attention"};
  j["rope_local_base_freq"] = 10000.0;
  j["rope_theta"] = 1e6;
  ArchSpec spec = spec_ok(j);
  EXPECT_EQ(spec.window(0), 4);
  EXPECT_EQ(spec.window(1), 0);
  EXPECT_TRUE(spec.local_rope(0) && !spec.local_rope(1));
  EXPECT_EQ(spec.sliding_rope->theta, 10000.0);
  EXPECT_EQ(spec.activation, Activation::kGeluTanh);
  EXPECT_EQ(spec.norm_offset, 1.0f);

  j.erase("layer_types");
  j["sliding_window_pattern"] = 2;  // layer 1 of 2 full
  spec = spec_ok(j);
  EXPECT_EQ(spec.window(0), 4);
  EXPECT_EQ(spec.window(1), 0);

  json bad = j;
  bad["layer_types"] = {"sliding_attention", "chunked_attention"};
  expect_error(bad, ErrorKind::kUnsupported, "chunked_attention");
  bad["layer_types"] = {"sliding_attention"};
  expect_error(bad, ErrorKind::kInvalidInput, "layer_types");
  bad = j;
  bad["hidden_activation"] = "gelu";
  expect_error(bad, ErrorKind::kUnsupported, "hidden_activation");
  bad = j;
  bad["use_bidirectional_attention"] = true;
  expect_error(bad, ErrorKind::kUnsupported, "use_bidirectional_attention");
}

// The family-feature refusals the tests above leave out, each by its field (issue
// 18, point 5). Each was checked by building without its guard: the line fails.
TEST(ArchTest, FamilyFieldRefusalsNameTheirField) {
  json j = with_type("llama");
  j["hidden_act"] = "gelu";
  expect_error(j, ErrorKind::kUnsupported, "hidden_act '\"gelu\"' is not supported");

  j = with_type("qwen3_moe");
  j["num_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  j["mlp_only_layers"] = 1;
  expect_error(j, ErrorKind::kInvalidInput, "field 'mlp_only_layers' is not an array");

  j = gemma3_config();
  j["query_pre_attn_scalar"] = 0;
  expect_error(j, ErrorKind::kInvalidInput, "field 'query_pre_attn_scalar' must be > 0");
  j.erase("query_pre_attn_scalar");
  j["final_logit_softcapping"] = -30.0;
  expect_error(j, ErrorKind::kInvalidInput, "field 'final_logit_softcapping'");
  j.erase("final_logit_softcapping");
  j["rope_local_base_freq"] = 1.0;
  expect_error(j, ErrorKind::kInvalidInput, "field 'rope_local_base_freq' must be > 1");

  j = with_type("phi3");  // head_dim 16: 8 rotary pairs
  j["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", json::array({1, 1, 1, 1, 1, 1, 1, 0})},
                       {"long_factor", json::array({2, 2, 2, 2, 2, 2, 2, 2})}};
  j["original_max_position_embeddings"] = 64;
  expect_error(j, ErrorKind::kInvalidInput, "longrope 'short_factor' holds a value that is not a positive number");
  j["rope_scaling"]["short_factor"] = json::array({1, 1, 1, 1, 1, 1, 1});
  expect_error(j, ErrorKind::kInvalidInput, "differ in length");
}

// Gemma3TextConfig's tie_word_embeddings defaults to true: the spec carries it
// when the config is silent, and nothing when the config states either value.
TEST(ArchTest, Gemma3TiesEmbeddingsUnlessTheConfigSaysOtherwise) {
  json j = gemma3_config();
  EXPECT_EQ(spec_ok(j).tie_word_embeddings, std::optional<bool>(true));
  j["tie_word_embeddings"] = false;
  EXPECT_EQ(spec_ok(j).tie_word_embeddings, std::nullopt);
  EXPECT_EQ(spec_ok(with_type("llama")).tie_word_embeddings, std::nullopt);
}

// bench/shapes/glm-4.5-air.json (the published GLM-4.5-Air config) reads into its spec.
TEST(ArchTest, PublishedGlm45AirShapeReads) {
  auto config =
      load_model_config_file(std::string(TESSERA_SOURCE_DIR) + "/bench/shapes/glm-4.5-air.json", check_model_type);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const ArchSpec spec = *arch_for(*config);
  EXPECT_EQ(spec.moe.routing, Routing::kSigmoidGroupTopK);
  EXPECT_EQ(spec.moe.experts, 128);
  EXPECT_EQ(spec.moe.top_k, 8);
  EXPECT_EQ(spec.moe.intermediate, 1408);
  EXPECT_EQ(spec.moe.shared_intermediate, 1408);
  EXPECT_EQ(spec.rotary_dim(config->head_dim), 64);
  EXPECT_TRUE(spec.qkv_bias && !spec.qk_norm);
  EXPECT_TRUE(!spec.has_experts(0) && spec.has_experts(1) && spec.has_experts(45));
}

// Gemma3TextConfig's rope_theta (1e6) and head_dim (256) defaults are not the
// shared ones io applies: a config silent on either is refused by name (without
// the check, the first would rotate with base 10000 and the spec would be made).
TEST(ArchTest, Gemma3RefusesSilenceOnFieldsItsConfigClassDefaultsOtherwise) {
  json j = gemma3_config();
  spec_ok(j);
  j.erase("rope_theta");
  expect_error(j, ErrorKind::kInvalidInput, "field 'rope_theta' is missing: gemma3's default");
  j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};  // transformers 5
  spec_ok(j);
  j.erase("head_dim");
  expect_error(j, ErrorKind::kInvalidInput, "field 'head_dim' is missing: gemma3's default (256)");
}

// bench/shapes/gemma-3-12b.json reads as the published checkpoint's text_config would.
TEST(ArchTest, PublishedGemma3ShapeReads) {
  auto config =
      load_model_config_file(std::string(TESSERA_SOURCE_DIR) + "/bench/shapes/gemma-3-12b.json", check_model_type);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const ArchSpec spec = *arch_for(*config);
  EXPECT_EQ(config->head_dim, 256);
  EXPECT_EQ(config->rope.type, RopeType::kLinear);
  EXPECT_EQ(spec.window(0), 1024);
  EXPECT_EQ(spec.window(5), 0);  // every sixth layer is global
  EXPECT_EQ(spec.sliding_rope->theta, 10000.0);
  EXPECT_TRUE(config->tie_word_embeddings);
}

// GLM-4.5: transformers' Glm4MoeConfig defaults when a field is absent, the
// config's values when present, and the tensors of a dense and an MoE layer.
TEST(ArchTest, Glm4MoeRoutingSharedExpertAndDenseLayers) {
  json j = with_type("glm4_moe");
  j["head_dim"] = 32;
  j["num_hidden_layers"] = 4;
  const ArchSpec defaults = spec_ok(j);
  EXPECT_EQ(defaults.norm, NormPlacement::kPre);
  EXPECT_EQ(defaults.rope, RopeStyle::kRotateHalf);
  EXPECT_EQ(defaults.rotary_dim(32), 16);
  EXPECT_FALSE(defaults.qkv_bias || defaults.o_bias || defaults.qk_norm);
  EXPECT_EQ(defaults.moe.routing, Routing::kSigmoidGroupTopK);
  EXPECT_EQ(defaults.moe.experts, 128);
  EXPECT_EQ(defaults.moe.top_k, 8);
  EXPECT_EQ(defaults.moe.intermediate, 1408);
  EXPECT_EQ(defaults.moe.shared_intermediate, 1408);
  EXPECT_EQ(defaults.moe.groups, 1);
  EXPECT_EQ(defaults.moe.scaling, 1.0f);
  EXPECT_TRUE(defaults.moe.norm_topk_prob);
  EXPECT_FALSE(defaults.has_experts(0));
  EXPECT_TRUE(defaults.has_experts(1) && defaults.has_experts(3));

  j["n_routed_experts"] = 8;
  j["num_experts_per_tok"] = 3;
  j["moe_intermediate_size"] = 16;
  j["n_shared_experts"] = 2;
  j["n_group"] = 4;
  j["topk_group"] = 2;
  j["routed_scaling_factor"] = 2.5;
  j["first_k_dense_replace"] = 2;
  j["norm_topk_prob"] = false;
  j["attention_bias"] = true;
  j["use_qk_norm"] = true;
  j["topk_method"] = "noaux_tc";  // as some published configs say
  const ArchSpec spec = spec_ok(j);
  EXPECT_TRUE(spec.qkv_bias && !spec.o_bias && spec.qk_norm);
  EXPECT_EQ(spec.moe.shared_intermediate, 32);
  EXPECT_EQ(spec.moe.groups, 4);
  EXPECT_EQ(spec.moe.top_groups, 2);
  EXPECT_EQ(spec.moe.scaling, 2.5f);
  EXPECT_FALSE(spec.moe.norm_topk_prob);
  std::vector<bool> experts;
  for (int64_t layer = 0; layer < 4; ++layer) experts.push_back(spec.has_experts(layer));
  EXPECT_EQ(experts, (std::vector<bool>{false, false, true, true}));
  const ModelConfig config = *parse_model_config(j);
  std::vector<std::string> names;
  for (const LayerTensor& t : layer_tensors(config, spec, 2)) names.push_back(t.name);
  for (const char* name : {"mlp.gate.weight", "mlp.gate.e_score_correction_bias", "mlp.experts.7.down_proj.weight",
                           "mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.down_proj.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  EXPECT_EQ(names.size(), 2u + 4u + 3u + 2u + 2u + 8u * 3u + 3u);  // norms, attention, q/k/v bias, q/k norm, router
}

// Each glm4_moe refusal names its field (remove its check in arch/glm4_moe.cpp and this fails).
TEST(ArchTest, Glm4MoeRefusesRoutingItLacks) {
  json j = with_type("glm4_moe");
  j["n_routed_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 16;
  j["n_group"] = 3;  // 8 experts do not split into 3 groups
  expect_error(j, ErrorKind::kInvalidInput, "field 'n_group' = 3");
  j["n_group"] = 8;  // groups of one: transformers scores a group by its two best
  expect_error(j, ErrorKind::kInvalidInput, "field 'n_group' = 8");
  j["n_group"] = 2;
  j["topk_group"] = 3;
  expect_error(j, ErrorKind::kInvalidInput, "field 'topk_group' = 3 is outside [1, 2]");
  j["topk_group"] = 1;
  j["routed_scaling_factor"] = 0;
  expect_error(j, ErrorKind::kInvalidInput, "field 'routed_scaling_factor'");
  j["routed_scaling_factor"] = 1.0;
  j["first_k_dense_replace"] = 3;  // 2 layers
  expect_error(j, ErrorKind::kInvalidInput, "field 'first_k_dense_replace' = 3");
  j["first_k_dense_replace"] = 1;
  j["scoring_func"] = "softmax";
  expect_error(j, ErrorKind::kUnsupported, "field 'scoring_func' = \"softmax\" is not supported for glm4_moe");
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "greedy";
  expect_error(j, ErrorKind::kUnsupported, "field 'topk_method' = \"greedy\"");
  j["topk_method"] = "noaux_tc";
  j["num_experts_per_tok"] = 9;
  expect_error(j, ErrorKind::kInvalidInput, "field 'num_experts_per_tok' = 9 is outside [1, 8]");
  j["num_experts_per_tok"] = 2;
  EXPECT_EQ(spec_ok(j).moe.experts, 8);
}

}  // namespace
}  // namespace tessera
