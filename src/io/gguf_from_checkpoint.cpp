// A Hugging Face checkpoint as llama.cpp's converter lays it out in GGUF. The keys
// and their order are TextModel.set_gguf_parameters' and LlamaModel's
// (conversion/base.py, conversion/llama.py), the tensor names gguf_model.h's
// table read backwards, the q/k permutation LlamaModel.permute.
#include "io/gguf_from_checkpoint.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/gguf_model.h"
#include "io/model_config.h"

namespace tessera {

namespace {

float element_f32(const TensorView& view, uint64_t i) {
  switch (view.dtype) {
    case DType::kF32: return static_cast<const float*>(view.data)[i];
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(view.data)[i]);
    default: return bf16_to_f32(static_cast<const uint16_t*>(view.data)[i]);
  }
}

// The converter's generate_extra_tensors for llama3 rope scaling (in double, as
// tools/llama_cpp_peer/tessera_to_gguf.py computes it).
std::vector<float> llama3_rope_factors(const RopeConfig& rope, int64_t head_dim) {
  const double old_context = static_cast<double>(rope.original_max_position_embeddings);
  std::vector<float> factors;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const double wavelength = 2 * M_PI * std::pow(rope.theta, static_cast<double>(i) / static_cast<double>(head_dim));
    if (wavelength < old_context / rope.high_freq_factor) {
      factors.push_back(1.0f);
    } else if (wavelength > old_context / rope.low_freq_factor) {
      factors.push_back(static_cast<float>(rope.factor));
    } else {
      const double smooth =
          (old_context / wavelength - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
      factors.push_back(static_cast<float>(1 / ((1 - smooth) / rope.factor + smooth)));
    }
  }
  return factors;
}

}  // namespace

Result<CheckpointAsGguf> CheckpointAsGguf::open(const std::string& dir) {
  TS_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config(dir));
  const auto arch = gguf_arch_for_model_type(config.model_type);
  if (!arch)
    return Status::unsupported(dir + ": model_type '" + config.model_type +
                               "' has no GGUF layout in tessera (supported: llama, mistral, qwen2, qwen3)");
  CheckpointAsGguf out;
  out.arch_ = arch->name;
  out.block_count_ = config.num_hidden_layers;
  TS_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::open(dir));
  out.checkpoint_ = std::make_shared<const Checkpoint>(std::move(checkpoint));

  const int64_t head_dim = config.head_dim ? config.head_dim : config.hidden_size / config.num_attention_heads;
  const std::string a = out.arch_ + ".";
  const auto u32 = [&out](std::string key, int64_t value) {
    out.keys_.push_back([key, value](GgufWriter& w) { w.set_u32(key, static_cast<uint32_t>(value)); });
  };
  const auto f32 = [&out](std::string key, double value) {
    out.keys_.push_back([key, value](GgufWriter& w) { w.set_f32(key, static_cast<float>(value)); });
  };
  const std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
  out.keys_.push_back([arch = out.arch_, name](GgufWriter& w) {
    w.set_string("general.architecture", arch);
    w.set_string("general.name", name.empty() ? std::string("model") : name);
  });
  u32(a + "block_count", config.num_hidden_layers);
  u32(a + "context_length", config.max_position_embeddings);
  u32(a + "embedding_length", config.hidden_size);
  u32(a + "feed_forward_length", config.intermediate_size);
  u32(a + "attention.head_count", config.num_attention_heads);
  u32(a + "attention.head_count_kv", config.num_key_value_heads);
  switch (config.rope.type) {
    case RopeType::kDefault:
    case RopeType::kLlama3: break;  // llama3: the rope_freqs tensor below
    case RopeType::kLinear:
      out.keys_.push_back([key = a + "rope.scaling.type"](GgufWriter& w) { w.set_string(key, "linear"); });
      f32(a + "rope.scaling.factor", config.rope.factor);
      break;
    default:
      return Status::unsupported(dir +
                                 ": this rope scaling has no GGUF form that tessera reads (supported: none, "
                                 "linear, llama3)");
  }
  if (config.rope.type == RopeType::kLlama3 && out.arch_ != "llama")
    return Status::unsupported(dir + ": llama3 rope scaling on a " + out.arch_ + " model");
  f32(a + "rope.freq_base", config.rope.theta);
  f32(a + "attention.layer_norm_rms_epsilon", config.rms_norm_eps);
  if (config.fields().contains("head_dim") && !config.fields()["head_dim"].is_null()) {
    u32(a + "attention.key_length", head_dim);
    u32(a + "attention.value_length", head_dim);
  }
  if (out.arch_ == "llama") {
    u32(a + "vocab_size", config.vocab_size);
    u32(a + "rope.dimension_count", head_dim);
  }

  auto vocab = read_hf_gguf_vocab(dir, config.vocab_size);
  if (vocab.ok()) {
    out.vocab_ = std::move(vocab).value();
  } else if (vocab.status().kind() == ErrorKind::kNotFound) {
    std::fprintf(stderr, "[quantize] %s: %s; the GGUF gets no vocabulary (tokenizer.ggml.model \"none\")\n",
                 dir.c_str(), vocab.status().message().c_str());
  } else {
    return vocab.status();
  }

  if (config.rope.type == RopeType::kLlama3) {
    Tensor freqs{.name = "rope_freqs.weight", .values = llama3_rope_factors(config.rope, head_dim)};
    freqs.dims = {freqs.values.size()};
    out.tensors_.push_back(std::move(freqs));
  }
  for (const std::string& hf : out.checkpoint_->names()) {
    Tensor t{.name = gguf_tensor_name(hf), .hf_name = hf};
    if (t.name.empty())
      return Status::unsupported(dir + ": tensor '" + hf + "' has no place in a " + out.arch_ +
                                 " GGUF that tessera writes");
    TS_ASSIGN_OR_RETURN(const TensorView view, out.checkpoint_->get(hf));
    if (view.dtype != DType::kF32 && view.dtype != DType::kF16 && view.dtype != DType::kBF16)
      return Status::unsupported(out.checkpoint_->file_of(hf) + ": tensor '" + hf + "' is " +
                                 std::string(dtype_name(view.dtype)) + "; only f32, f16 and bf16 are quantized");
    if (view.shape.empty() || view.shape.size() > 2)
      return Status::unsupported(out.checkpoint_->file_of(hf) + ": tensor '" + hf + "' has shape " +
                                 shape_string(view.shape));
    for (auto d = view.shape.rbegin(); d != view.shape.rend(); ++d) t.dims.push_back(static_cast<uint64_t>(*d));
    if (arch->permuted_qk && (hf.find(".q_proj.") != std::string::npos || hf.find(".k_proj.") != std::string::npos)) {
      t.permute_heads =
          hf.find(".q_proj.") != std::string::npos ? config.num_attention_heads : config.num_key_value_heads;
      if (view.shape[0] % (2 * t.permute_heads) != 0)
        return Status::invalid_input(out.checkpoint_->file_of(hf) + ": tensor '" + hf + "' has " +
                                     std::to_string(view.shape[0]) + " rows, not pairs in " +
                                     std::to_string(t.permute_heads) + " heads");
    }
    out.tensors_.push_back(std::move(t));
  }
  return out;
}

void CheckpointAsGguf::write_metadata(GgufWriter& writer) const {
  for (const auto& set : keys_) set(writer);
  if (vocab_) write_hf_gguf_vocab(*vocab_, writer);
  else writer.set_string("tokenizer.ggml.model", "none");
}

void CheckpointAsGguf::rows(size_t index, uint64_t begin, uint64_t end, std::vector<float>& out) const {
  const Tensor& t = tensors_.at(index);
  const uint64_t row = t.dims[0];
  out.resize((end - begin) * row);
  if (t.hf_name.empty()) {
    std::copy(t.values.begin() + static_cast<int64_t>(begin * row), t.values.begin() + static_cast<int64_t>(end * row),
              out.begin());
    return;
  }
  const TensorView view = checkpoint_->get(t.hf_name).value();  // checked at open
  // LlamaModel.permute: row (head, i, half) of the GGUF is row (head, half, i) of
  // the checkpoint. A 1-D tensor (a bias) is permuted element by element.
  const bool elements = t.dims.size() == 1;
  const uint64_t rows_total = elements ? row : (t.dims.size() == 2 ? t.dims[1] : 1);
  const uint64_t head_dim = t.permute_heads ? rows_total / static_cast<uint64_t>(t.permute_heads) : 0;
  const auto source_row = [&](uint64_t r) {
    if (!t.permute_heads) return r;
    const uint64_t h = r / head_dim, within = r % head_dim;
    return h * head_dim + (within % 2) * (head_dim / 2) + within / 2;
  };
  if (elements) {
    for (uint64_t i = 0; i < row; ++i) out[i] = element_f32(view, source_row(i));
    return;
  }
  for (uint64_t r = begin; r < end; ++r) {
    const uint64_t from = source_row(r) * row;
    float* dst = out.data() + (r - begin) * row;
    for (uint64_t i = 0; i < row; ++i) dst[i] = element_f32(view, from + i);
  }
}

}  // namespace tessera
