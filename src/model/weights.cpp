// Binds a checkpoint's tensors to ModelWeights as the family's ArchSpec lists
// them (layer_tensors), checking every tensor's presence, dtype and shape
// against the config before anything runs.
#include <utility>

#include "core/check.h"
#include "io/checkpoint.h"
#include "model/model.h"

namespace tessera {

namespace {

bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

class Binder {
 public:
  explicit Binder(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  Status bind(const std::string& name, const std::vector<int64_t>& shape, TensorView& out) {
    auto view = checkpoint_.get(name);
    if (!view.ok()) return view.status();
    const std::string where = checkpoint_.file_of(name) + ": tensor '" + name + "'";
    // GGUF's quantized blocks are computed on as they are, for matrices only.
    if (!is_float(view->dtype) && !(dtype_is_quantized(view->dtype) && shape.size() == 2))
      return Status::invalid_input(where + " has dtype " + std::string(dtype_name(view->dtype)) +
                                   ", expected f32, bf16 or f16" +
                                   (shape.size() == 2 ? " or a GGUF quantized type" : ""));
    if (view->shape != shape)
      return Status::invalid_input(where + " has shape " + shape_string(view->shape) + ", expected " +
                                   shape_string(shape));
    out = std::move(view).value();
    return {};
  }

 private:
  const Checkpoint& checkpoint_;
};

// Multimodal wrappers nest the language model under another prefix. A stage's
// own checkpoint (shipped weights) may hold only layers from `first_layer` on.
Result<TensorNames> detect_names(const Checkpoint& checkpoint, const ArchSpec& arch, int64_t first_layer) {
  static const std::pair<const char*, const char*> kLayouts[] = {
      {"model.", "lm_head.weight"},
      {"model.language_model.", "lm_head.weight"},
      {"language_model.model.", "language_model.lm_head.weight"},
  };
  for (const auto& [prefix, lm_head] : kLayouts) {
    if (checkpoint.has(std::string(prefix) + "embed_tokens.weight") ||
        checkpoint.has(std::string(prefix) + "norm.weight") ||
        checkpoint.has(std::string(prefix) + "layers." + std::to_string(first_layer) + "." + arch.names.attn_norm))
      return TensorNames{prefix, lm_head};
  }
  return Status::invalid_input(checkpoint.dir() +
                               ": no tensor named model.embed_tokens.weight, model.norm.weight "
                               "or model.layers." +
                               std::to_string(first_layer) + ".* (not a Llama-family checkpoint?)");
}

}  // namespace

TensorView& LayerTensor::in(LayerWeights& layer) const {
  if (slot) return layer.*slot;
  std::vector<TensorView>& views = layer.*list;
  if (views.size() <= index) views.resize(index + 1);
  return views[index];
}

const TensorView& LayerTensor::in(const LayerWeights& layer) const {
  if (slot) return layer.*slot;
  static const TensorView kEmpty{};
  const std::vector<TensorView>& views = layer.*list;
  return index < views.size() ? views[index] : kEmpty;
}

void LayerTensor::split(LayerWeights& layer) const {
  if (parts.empty()) return;
  const TensorView& whole = in(layer);
  TS_CHECK(whole.row_group == 1, "splitting ", name, " laid out for a device");
  const size_t row_bytes = dtype_bytes(whole.dtype, whole.dim(1));
  int64_t row = 0;
  for (const auto& [part, rows] : parts) {
    layer.*part = TensorView{whole.dtype,
                             {rows, whole.dim(1)},
                             static_cast<const uint8_t*>(whole.data) + static_cast<size_t>(row) * row_bytes};
    row += rows;
  }
}

std::vector<LayerTensor> layer_tensors(const ModelConfig& c, const ArchSpec& arch, int64_t layer) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  const LayerTensorNames& n = arch.names;
  std::vector<LayerTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, TensorView LayerWeights::*slot, bool norm = false) {
    out.push_back({std::move(name), std::move(shape), slot, norm});
  };
  add(n.attn_norm, {h}, &LayerWeights::attn_norm, true);
  if (arch.fused_qkv) {
    out.push_back({.name = n.qkv_proj + ".weight",
                   .shape = {q + 2 * kv, h},
                   .slot = &LayerWeights::wqkv,
                   .parts = {{&LayerWeights::wq, q}, {&LayerWeights::wk, kv}, {&LayerWeights::wv, kv}}});
  } else {
    add(n.q_proj + ".weight", {q, h}, &LayerWeights::wq);
    add(n.k_proj + ".weight", {kv, h}, &LayerWeights::wk);
    add(n.v_proj + ".weight", {kv, h}, &LayerWeights::wv);
  }
  add(n.o_proj + ".weight", {h, q}, &LayerWeights::wo);
  if (arch.qkv_bias) {
    add(n.q_proj + ".bias", {q}, &LayerWeights::bq);
    add(n.k_proj + ".bias", {kv}, &LayerWeights::bk);
    add(n.v_proj + ".bias", {kv}, &LayerWeights::bv);
  }
  if (arch.o_bias) add(n.o_proj + ".bias", {h}, &LayerWeights::bo);
  if (arch.qk_norm) {
    add(n.q_norm, {c.head_dim}, &LayerWeights::q_norm, true);
    add(n.k_norm, {c.head_dim}, &LayerWeights::k_norm, true);
  }
  if (arch.norm == NormPlacement::kSandwich) add(n.post_attn_norm, {h}, &LayerWeights::post_attn_norm, true);
  add(n.ffn_norm, {h}, &LayerWeights::ffn_norm, true);
  if (arch.norm == NormPlacement::kSandwich) add(n.post_ffn_norm, {h}, &LayerWeights::post_ffn_norm, true);
  if (arch.has_experts(layer)) {
    const MoeSpec& moe = arch.moe;
    add(n.router, {moe.experts, h}, &LayerWeights::router);
    if (moe.routing == Routing::kSigmoidGroupTopK) add(n.router_bias, {moe.experts}, &LayerWeights::router_bias);
    auto expert = [&](int64_t e, const std::string& name, std::vector<int64_t> shape,
                      std::vector<TensorView> LayerWeights::*list) {
      out.push_back({.name = n.experts + std::to_string(e) + "." + name + ".weight",
                     .shape = std::move(shape),
                     .list = list,
                     .index = static_cast<size_t>(e)});
    };
    for (int64_t e = 0; e < moe.experts; ++e) {
      expert(e, n.expert_gate, {moe.intermediate, h}, &LayerWeights::expert_gate);
      expert(e, n.expert_up, {moe.intermediate, h}, &LayerWeights::expert_up);
      expert(e, n.expert_down, {h, moe.intermediate}, &LayerWeights::expert_down);
    }
    if (const int64_t shared = moe.shared_intermediate; shared > 0) {
      add(n.shared_expert + n.expert_gate + ".weight", {shared, h}, &LayerWeights::shared_gate);
      add(n.shared_expert + n.expert_up + ".weight", {shared, h}, &LayerWeights::shared_up);
      add(n.shared_expert + n.expert_down + ".weight", {h, shared}, &LayerWeights::shared_down);
    }
    return out;
  }
  if (arch.fused_gate_up) {
    out.push_back({.name = n.gate_up_proj + ".weight",
                   .shape = {2 * inter, h},
                   .slot = &LayerWeights::w_gate_up,
                   .parts = {{&LayerWeights::w_gate, inter}, {&LayerWeights::w_up, inter}}});
  } else {
    add(n.gate_proj + ".weight", {inter, h}, &LayerWeights::w_gate);
    add(n.up_proj + ".weight", {inter, h}, &LayerWeights::w_up);
  }
  add(n.down_proj + ".weight", {h, inter}, &LayerWeights::w_down);
  if (arch.mlp_bias) {
    add(n.gate_proj + ".bias", {inter}, &LayerWeights::b_gate);
    add(n.up_proj + ".bias", {inter}, &LayerWeights::b_up);
    add(n.down_proj + ".bias", {h}, &LayerWeights::b_down);
  }
  return out;
}

Result<Model> Model::load(const std::string& dir, std::optional<LayerRange> range, Shard shard) {
  Model model;
  TS_ASSIGN_OR_RETURN(model.config_, load_model_config(dir, check_model_type));
  const ModelConfig& c = model.config_;
  auto arch = arch_for(c);
  if (!arch.ok()) return arch.status().with_context(dir + "/config.json");
  model.arch_ = std::move(arch).value();
  if (model.arch_.tie_word_embeddings) model.config_.tie_word_embeddings = *model.arch_.tie_word_embeddings;
  model.range_ = range.value_or(LayerRange{0, c.num_hidden_layers});
  if (model.range_.begin < 0 || model.range_.begin >= model.range_.end || model.range_.end > c.num_hidden_layers)
    return Status::invalid_input("layer range [" + std::to_string(model.range_.begin) + ", " +
                                 std::to_string(model.range_.end) + ") is not inside [0, " +
                                 std::to_string(c.num_hidden_layers) + ")");

  auto checkpoint = std::make_shared<Checkpoint>();
  TS_ASSIGN_OR_RETURN(*checkpoint, Checkpoint::open(dir));
  TS_ASSIGN_OR_RETURN(const TensorNames names, detect_names(*checkpoint, model.arch_, model.range_.begin));
  Binder b(*checkpoint);
  ModelWeights& w = model.weights_;
  const std::vector<int64_t> vocab_by_hidden = {c.vocab_size, c.hidden_size};
  if (model.has_entry() || (model.has_exit() && c.tie_word_embeddings))
    TS_RETURN_IF_ERROR(b.bind(names.global("embed_tokens.weight"), vocab_by_hidden, w.embed));
  w.layers.resize(static_cast<size_t>(model.range_.end - model.range_.begin));
  for (int64_t i = model.range_.begin; i < model.range_.end; ++i) {
    LayerWeights& layer = w.layers[static_cast<size_t>(i - model.range_.begin)];
    for (const LayerTensor& t : layer_tensors(c, model.arch_, i)) {
      TS_RETURN_IF_ERROR(b.bind(names.layer(i, t.name), t.shape, t.in(layer)));
      t.split(layer);
    }
  }
  if (model.has_exit()) {
    TS_RETURN_IF_ERROR(b.bind(names.global("norm.weight"), {c.hidden_size}, w.final_norm));
    if (c.tie_word_embeddings) {
      w.lm_head = w.embed;
    } else if (checkpoint->has(names.lm_head)) {
      TS_RETURN_IF_ERROR(b.bind(names.lm_head, vocab_by_hidden, w.lm_head));
    } else {
      return Status::invalid_input(dir + ": tensor '" + names.lm_head +
                                   "' is missing and config.json has tie_word_embeddings false");
    }
  }
  model.storage_ = std::move(checkpoint);
  model.layer_config_ = model.config_;
  if (shard.ranks == 1 && shard.rank == 0) return model;
  auto part = model.cut(shard);
  if (!part.ok()) return part.status().with_context(dir);
  return std::move(part).value();
}

std::vector<std::pair<std::string, TensorView>> named_weights(const Model& model) {
  const TensorNames names{"model."};
  const ModelWeights& w = model.weights();
  std::vector<std::pair<std::string, TensorView>> out;
  auto add = [&](std::string name, const TensorView& t) {
    if (!t.empty()) out.emplace_back(std::move(name), t);
  };
  add(names.global("embed_tokens.weight"), w.embed);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const int64_t layer = model.range().begin + static_cast<int64_t>(i);
    for (const LayerTensor& t : layer_tensors(model.layer_config(), model.arch(), layer))
      add(names.layer(layer, t.name), t.in(l));
  }
  add(names.global("norm.weight"), w.final_norm);
  if (!w.lm_head_is_embed()) add(names.lm_head, w.lm_head);
  return out;
}

uint64_t Model::weight_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, tensor] : named_weights(*this)) total += tensor.nbytes();
  return total;
}

}  // namespace tessera
