// Model: a config, its family's ArchSpec, and views of the weights of a layer
// range, with whatever owns their bytes (the memory-mapped checkpoint, or
// buffers of seeded random weights for benchmarks).
//
// A Model bound to layers [begin, end) holds the embedding only when begin == 0
// and the final norm + LM head only when end == num_hidden_layers; tensors of
// other layers are never touched, so a pipeline stage pages in only its own.
// A Model of one tensor-parallel rank (Shard, model/shard.h) holds only that
// rank's rows and columns of every layer: row cuts are views of the mapped
// file, column cuts are copied at load, so a rank pages in only its own part.
// Immutable after construction; share it between threads freely.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/model_config.h"
#include "model/arch/arch.h"

namespace tessera {

struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// A tensor-parallel rank: rank `rank` of `ranks` (model/shard.h says what it holds).
struct Shard {
  int rank = 0;
  int ranks = 1;
};

struct LayerWeights {
  TensorView attn_norm;       // [hidden]
  TensorView wq, wk, wv, wo;  // [heads*head_dim, hidden], [kv*head_dim, hidden] x2, [hidden, heads*head_dim]
  TensorView bq, bk, bv, bo;  // biases; empty unless the ArchSpec has them
  TensorView q_norm, k_norm;  // [head_dim]; empty unless ArchSpec::qk_norm
  TensorView ffn_norm;        // [hidden]
  TensorView post_attn_norm, post_ffn_norm;  // [hidden]; NormPlacement::kSandwich only
  // Fused projections as stored (ArchSpec::fused_qkv, fused_gate_up); wq, wk, wv
  // and w_gate, w_up are then views of their rows.
  TensorView wqkv, w_gate_up;
  TensorView w_gate, w_up, w_down;  // [inter, hidden] x2, [hidden, inter]
  TensorView b_gate, b_up, b_down;  // empty unless ArchSpec::mlp_bias
  // A layer with experts (ArchSpec::has_experts) has these instead of w_gate, w_up, w_down:
  TensorView router;                                            // [experts, hidden]
  std::vector<TensorView> expert_gate, expert_up, expert_down;  // [experts] of [inter, hidden] x2, [hidden, inter]
  TensorView router_bias;                                       // [experts]; Routing::kSigmoidGroupTopK only
  // MoeSpec::shared_intermediate > 0: the shared expert, [shared, hidden] x2, [hidden, shared].
  TensorView shared_gate, shared_up, shared_down;
};

// One tensor of a decoder layer as an ArchSpec has it: its name after
// "<prefix>layers.<i>.", its shape, its place in LayerWeights (a slot, or entry
// `index` of an expert list), and whether it is a norm weight (random weights
// set those to 1). A fused tensor also names the slots its rows split into.
struct LayerTensor {
  std::string name;
  std::vector<int64_t> shape;
  TensorView LayerWeights::*slot = nullptr;
  bool norm = false;
  std::vector<TensorView> LayerWeights::*list = nullptr;
  size_t index = 0;
  std::vector<std::pair<TensorView LayerWeights::*, int64_t>> parts{};  // (slot, rows), in row order

  // Its place in `layer` (an expert list grows to hold it).
  TensorView& in(LayerWeights& layer) const;
  const TensorView& in(const LayerWeights& layer) const;
  // For a fused tensor: sets each part's slot to a view of its rows of in(layer)
  // (whoever binds or places the tensor calls it after).
  void split(LayerWeights& layer) const;
};

// The tensors layer `layer` of `arch` has, in checkpoint order; slots it lacks
// stay empty. The loader, the random weights, named_weights and Forward's
// placement all walk this one list.
std::vector<LayerTensor> layer_tensors(const ModelConfig& config, const ArchSpec& arch, int64_t layer);

struct ModelWeights {
  TensorView embed;                  // [vocab, hidden]; only when the range starts at layer 0 (whole on every rank)
  std::vector<LayerWeights> layers;  // layers[i] is layer range.begin + i
  TensorView final_norm;             // [hidden]; only when the range ends at the last layer
  // [vocab, hidden], rows of the embedding when tied; a rank's rows of the
  // vocabulary when sharded (ShardPlan::vocab_begin, vocab_rows).
  TensorView lm_head;
  // Whether lm_head is the embedding itself (tied and whole): counted and placed once.
  bool lm_head_is_embed() const { return lm_head.data == embed.data && lm_head.shape == embed.shape; }
};

class Model {
 public:
  // Loads DIR (config.json + safetensors), binding only `range` (all layers by
  // default) and only `shard`'s part of each (the whole model by default).
  // Errors name the file and the tensor or field, or the counts a shard refuses.
  static Result<Model> load(const std::string& dir, std::optional<LayerRange> range = std::nullopt, Shard shard = {});
  // Seeded random weights in a real shape (same seed, same weights), for benchmarks;
  // `shard`'s part of them (made whole, then cut, so every rank cuts the same model).
  static Result<Model> random(const ModelConfig& config, DType dtype, uint64_t seed, Shard shard = {});
  // `shard`'s part of this (whole) model, sharing its storage (model/shard.h).
  Result<Model> cut(Shard shard) const;
  // A rank's part received as tensors (shipped to a TP rank): `tensors` of
  // shard_tensors(config, its arch, range, shard's plan), in that order and of
  // those shapes, whose bytes `storage` keeps alive (model/shard.h).
  static Result<Model> assemble(const ModelConfig& config, LayerRange range, Shard shard,
                                std::span<const TensorView> tensors, std::shared_ptr<const void> storage);

  // The whole model's config, as config.json says (vocabulary, hidden size, heads).
  const ModelConfig& config() const { return config_; }
  // The config of this rank's part of every layer: its heads, KV heads and
  // intermediate size (config() itself for a whole model). layer_tensors of it
  // gives the shapes this Model's layers have.
  const ModelConfig& layer_config() const { return layer_config_; }
  // The family's spec; a shard's MoeSpec::intermediate is its own part.
  const ArchSpec& arch() const { return arch_; }
  Shard shard() const { return shard_; }
  const ModelWeights& weights() const { return weights_; }
  LayerRange range() const { return range_; }
  bool has_entry() const { return range_.begin == 0; }
  bool has_exit() const { return range_.end == config_.num_hidden_layers; }
  // Bytes of distinct weight tensors bound (a tied LM head counts once).
  uint64_t weight_bytes() const;

 private:
  ModelConfig config_;
  ModelConfig layer_config_;
  ArchSpec arch_;
  Shard shard_;
  LayerRange range_;
  ModelWeights weights_;
  std::shared_ptr<const void> storage_;  // keeps the mapped files or random buffers alive
};

// The Hugging Face tensor names of one checkpoint layout ("model.layers.3.mlp.up_proj.weight").
struct TensorNames {
  std::string prefix;  // "model." (or "model.language_model." etc. for multimodal wrappers)
  std::string lm_head = "lm_head.weight";
  std::string layer(int64_t index, std::string_view suffix) const {
    return prefix + "layers." + std::to_string(index) + "." + std::string(suffix);
  }
  std::string global(const char* suffix) const { return prefix + suffix; }
};

// Every bound tensor under its Hugging Face name ("model.layers.0.self_attn.q_proj.weight"),
// in checkpoint order; a tied LM head is listed once, as the embedding.
std::vector<std::pair<std::string, TensorView>> named_weights(const Model& model);

}  // namespace tessera
