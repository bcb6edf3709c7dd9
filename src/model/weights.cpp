// Binds a checkpoint's tensors to ModelWeights, checking every tensor's
// presence, dtype and shape against the config before anything runs.
#include <utility>

#include "io/checkpoint.h"
#include "model/model.h"

namespace tessera {

namespace {

bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

class Binder {
 public:
  Binder(const Checkpoint& checkpoint, TensorNames names) : checkpoint_(checkpoint), names_(std::move(names)) {}

  Status bind(const std::string& name, std::vector<int64_t> shape, TensorView& out) {
    auto view = checkpoint_.get(name);
    if (!view.ok()) return view.status();
    const std::string where = checkpoint_.file_of(name) + ": tensor '" + name + "'";
    if (!is_float(view->dtype))
      return Status::invalid_input(where + " has dtype " + std::string(dtype_name(view->dtype)) +
                                   ", expected f32, bf16 or f16");
    if (view->shape != shape)
      return Status::invalid_input(where + " has shape " + shape_string(view->shape) + ", expected " +
                                   shape_string(shape));
    out = std::move(view).value();
    return {};
  }
  Status bind_layer(int64_t layer, const char* suffix, std::vector<int64_t> shape, TensorView& out) {
    return bind(names_.layer(layer, suffix), std::move(shape), out);
  }

 private:
  const Checkpoint& checkpoint_;
  TensorNames names_;
};

// Multimodal wrappers nest the language model under another prefix. A stage's
// own checkpoint (shipped weights) may hold only layers from `first_layer` on.
Result<TensorNames> detect_names(const Checkpoint& checkpoint, int64_t first_layer) {
  static const std::pair<const char*, const char*> kLayouts[] = {
      {"model.", "lm_head.weight"},
      {"model.language_model.", "lm_head.weight"},
      {"language_model.model.", "language_model.lm_head.weight"},
  };
  for (const auto& [prefix, lm_head] : kLayouts) {
    if (checkpoint.has(std::string(prefix) + "embed_tokens.weight") ||
        checkpoint.has(std::string(prefix) + "norm.weight") ||
        checkpoint.has(std::string(prefix) + "layers." + std::to_string(first_layer) + ".input_layernorm.weight"))
      return TensorNames{prefix, lm_head};
  }
  return Status::invalid_input(checkpoint.dir() +
                               ": no tensor named model.embed_tokens.weight, model.norm.weight "
                               "or model.layers." +
                               std::to_string(first_layer) + ".* (not a Llama-family checkpoint?)");
}

Status bind_layer(Binder& b, const ModelConfig& c, const ArchSpec& arch, int64_t i, LayerWeights& w) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  TS_RETURN_IF_ERROR(b.bind_layer(i, "input_layernorm.weight", {h}, w.attn_norm));
  TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.q_proj.weight", {q, h}, w.wq));
  TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.k_proj.weight", {kv, h}, w.wk));
  TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.v_proj.weight", {kv, h}, w.wv));
  TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.o_proj.weight", {h, q}, w.wo));
  if (arch.qkv_bias) {
    TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.q_proj.bias", {q}, w.bq));
    TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.k_proj.bias", {kv}, w.bk));
    TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.v_proj.bias", {kv}, w.bv));
  }
  if (arch.o_bias) TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.o_proj.bias", {h}, w.bo));
  if (arch.qk_norm) {
    TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.q_norm.weight", {c.head_dim}, w.q_norm));
    TS_RETURN_IF_ERROR(b.bind_layer(i, "self_attn.k_norm.weight", {c.head_dim}, w.k_norm));
  }
  TS_RETURN_IF_ERROR(b.bind_layer(i, "post_attention_layernorm.weight", {h}, w.ffn_norm));
  TS_RETURN_IF_ERROR(b.bind_layer(i, "mlp.gate_proj.weight", {inter, h}, w.w_gate));
  TS_RETURN_IF_ERROR(b.bind_layer(i, "mlp.up_proj.weight", {inter, h}, w.w_up));
  TS_RETURN_IF_ERROR(b.bind_layer(i, "mlp.down_proj.weight", {h, inter}, w.w_down));
  if (arch.mlp_bias) {
    TS_RETURN_IF_ERROR(b.bind_layer(i, "mlp.gate_proj.bias", {inter}, w.b_gate));
    TS_RETURN_IF_ERROR(b.bind_layer(i, "mlp.up_proj.bias", {inter}, w.b_up));
    TS_RETURN_IF_ERROR(b.bind_layer(i, "mlp.down_proj.bias", {h}, w.b_down));
  }
  return {};
}

}  // namespace

Result<Model> Model::load(const std::string& dir, std::optional<LayerRange> range) {
  Model model;
  TS_ASSIGN_OR_RETURN(model.config_, load_model_config(dir));
  const ModelConfig& c = model.config_;
  TS_ASSIGN_OR_RETURN(model.arch_, arch_for(c));
  model.range_ = range.value_or(LayerRange{0, c.num_hidden_layers});
  if (model.range_.begin < 0 || model.range_.begin >= model.range_.end || model.range_.end > c.num_hidden_layers)
    return Status::invalid_input("layer range [" + std::to_string(model.range_.begin) + ", " +
                                 std::to_string(model.range_.end) + ") is not inside [0, " +
                                 std::to_string(c.num_hidden_layers) + ")");

  auto checkpoint = std::make_shared<Checkpoint>();
  TS_ASSIGN_OR_RETURN(*checkpoint, Checkpoint::open(dir));
  TS_ASSIGN_OR_RETURN(const TensorNames names, detect_names(*checkpoint, model.range_.begin));
  Binder b(*checkpoint, names);
  ModelWeights& w = model.weights_;
  const std::vector<int64_t> vocab_by_hidden = {c.vocab_size, c.hidden_size};
  if (model.has_entry() || (model.has_exit() && c.tie_word_embeddings))
    TS_RETURN_IF_ERROR(b.bind(names.global("embed_tokens.weight"), vocab_by_hidden, w.embed));
  w.layers.resize(static_cast<size_t>(model.range_.end - model.range_.begin));
  for (int64_t i = model.range_.begin; i < model.range_.end; ++i)
    TS_RETURN_IF_ERROR(bind_layer(b, c, model.arch_, i, w.layers[static_cast<size_t>(i - model.range_.begin)]));
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
  return model;
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
    const std::pair<const char*, const TensorView*> tensors[] = {
        {"input_layernorm.weight", &l.attn_norm},
        {"self_attn.q_proj.weight", &l.wq},
        {"self_attn.k_proj.weight", &l.wk},
        {"self_attn.v_proj.weight", &l.wv},
        {"self_attn.o_proj.weight", &l.wo},
        {"self_attn.q_proj.bias", &l.bq},
        {"self_attn.k_proj.bias", &l.bk},
        {"self_attn.v_proj.bias", &l.bv},
        {"self_attn.o_proj.bias", &l.bo},
        {"self_attn.q_norm.weight", &l.q_norm},
        {"self_attn.k_norm.weight", &l.k_norm},
        {"post_attention_layernorm.weight", &l.ffn_norm},
        {"mlp.gate_proj.weight", &l.w_gate},
        {"mlp.up_proj.weight", &l.w_up},
        {"mlp.down_proj.weight", &l.w_down},
        {"mlp.gate_proj.bias", &l.b_gate},
        {"mlp.up_proj.bias", &l.b_up},
        {"mlp.down_proj.bias", &l.b_down},
    };
    for (const auto& [suffix, tensor] : tensors) add(names.layer(layer, suffix), *tensor);
  }
  add(names.global("norm.weight"), w.final_norm);
  if (w.lm_head.data != w.embed.data) add(names.lm_head, w.lm_head);
  return out;
}

uint64_t Model::weight_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, tensor] : named_weights(*this)) total += tensor.nbytes();
  return total;
}

}  // namespace tessera
