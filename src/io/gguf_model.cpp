// GGUF model files as Hugging Face checkpoints: metadata -> config.json,
// GGUF tensor names -> Hugging Face names. Key and tensor names are llama.cpp's
// (gguf-py/gguf/constants.py); the q/k permutation and the llama3 rope factors
// are those of llama.cpp's converter (conversion/llama.py).
#include "io/gguf_model.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gguf_quant.h"

namespace tessera {

namespace {

using json = nlohmann::json;

struct ArchInfo {
  const char* gguf;        // general.architecture
  const char* model_type;  // config.json's
  bool permuted_qk;        // the converter permuted q/k rows (llama.cpp's LlamaModel)
};
constexpr ArchInfo kArchs[] = {
    {"llama", "llama", true},
    {"qwen2", "qwen2", false},
    {"qwen3", "qwen3", false},
};

const ArchInfo* find_arch(std::string_view name) {
  for (const ArchInfo& a : kArchs)
    if (name == a.gguf) return &a;
  return nullptr;
}

// GGUF layer tensor -> Hugging Face name after "model.layers.<i>.".
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},          {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},          {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},          {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},     {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},       {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_up.weight", "mlp.up_proj.weight"},           {"ffn_up.bias", "mlp.up_proj.bias"},
    {"ffn_down.weight", "mlp.down_proj.weight"},       {"ffn_down.bias", "mlp.down_proj.bias"},
};
constexpr std::pair<const char*, const char*> kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
constexpr const char* kRopeFreqs = "rope_freqs.weight";  // read into the config, not a weight

// "blk.<i>.<rest>" -> the Hugging Face name, or "" when it is not a layer tensor we know.
std::string hf_layer_name(std::string_view name, uint64_t block_count) {
  if (name.substr(0, 4) != "blk.") return "";
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos || dot == 4 || dot > 10) return "";
  uint64_t layer = 0;
  for (char c : name.substr(4, dot - 4)) {
    if (c < '0' || c > '9') return "";
    layer = layer * 10 + static_cast<uint64_t>(c - '0');
  }
  if (layer >= block_count || (name[4] == '0' && dot != 5)) return "";
  const std::string_view rest = name.substr(dot + 1);
  for (const auto& [gguf, hf] : kLayerNames)
    if (rest == gguf) return "model.layers." + std::to_string(layer) + "." + hf;
  return "";
}

class Keys {
 public:
  Keys(const GgufMetadata& m, std::string arch) : m_(m), arch_(std::move(arch)) {}
  std::string key(const char* suffix) const { return arch_ + "." + suffix; }

  Result<int64_t> required(const char* suffix, int64_t min, int64_t max) const {
    const std::string k = key(suffix);
    auto value = m_.get_uint(k);
    if (!value.ok()) return value.status();
    if (*value < static_cast<uint64_t>(min) || *value > static_cast<uint64_t>(max))
      return Status::invalid_input("key '" + k + "' = " + std::to_string(*value) + " is outside [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
    return static_cast<int64_t>(*value);
  }
  Result<int64_t> optional(const char* suffix, int64_t min, int64_t max, int64_t fallback) const {
    if (!m_.find(key(suffix))) return fallback;
    return required(suffix, min, max);
  }
  Result<double> optional_float(const char* suffix, double fallback) const {
    if (!m_.find(key(suffix))) return fallback;
    return m_.get_float(key(suffix));
  }

 private:
  const GgufMetadata& m_;
  std::string arch_;
};

// llama.cpp's converter turns llama3 rope scaling into per-frequency factors
// (conversion/llama.py, generate_extra_tensors). They depend on the original
// context length and the two frequency factors only through their ratios, so we
// fix low_freq_factor = 1 and high_freq_factor = 4 (Meta's values), solve the
// original context from a factor between 1 and `factor`, and accept the result
// only if it reproduces every stored factor.
Status llama3_rope_from_factors(const std::vector<float>& stored, double theta, int64_t head_dim, json& config) {
  const std::string what = std::string("tensor '") + kRopeFreqs + "'";
  if (stored.size() * 2 != static_cast<size_t>(head_dim))
    return Status::invalid_input(what + " has " + std::to_string(stored.size()) +
                                 " factors, expected head_dim / 2 = " + std::to_string(head_dim / 2));
  double factor = 1.0;
  for (float f : stored) factor = std::max(factor, static_cast<double>(f));
  constexpr double kLow = 1.0, kHigh = 4.0;
  std::vector<double> wavelen(stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    const float freq = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / head_dim);
    wavelen[i] = 2 * M_PI / freq;
  }
  double old_context = 0;
  for (size_t i = 0; i < stored.size() && old_context == 0; ++i) {
    const double f = stored[i];
    if (f > 1.0 && f < factor) {  // smooth: f = 1 / ((1 - s) / factor + s)
      const double smooth = (1.0 / f - 1.0 / factor) / (1.0 - 1.0 / factor);
      old_context = std::round(wavelen[i] * (smooth * (kHigh - kLow) + kLow));
    }
  }
  if (old_context == 0) {  // no factor in between: any context with the boundary in the gap
    for (size_t i = 1; i < stored.size() && old_context == 0; ++i)
      if (stored[i - 1] == 1.0f && stored[i] == static_cast<float>(factor))
        old_context = std::ceil(wavelen[i - 1] * kHigh * (1 + 1e-9));
  }
  const auto reproduces = [&]() {
    if (old_context < 1) return false;
    for (size_t i = 0; i < stored.size(); ++i) {
      double f;
      if (wavelen[i] < old_context / kHigh) {
        f = 1;
      } else if (wavelen[i] > old_context / kLow) {
        f = factor;
      } else {
        const double smooth = (old_context / wavelen[i] - kLow) / (kHigh - kLow);
        f = 1 / ((1 - smooth) / factor + smooth);
      }
      if (std::abs(f - stored[i]) > 1e-5 * f) return false;
    }
    return true;
  };
  if (!reproduces()) return Status::unsupported(what + " holds rotary factors that llama3 scaling does not produce");
  config["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", factor},
                            {"low_freq_factor", kLow},
                            {"high_freq_factor", kHigh},
                            {"original_max_position_embeddings", static_cast<int64_t>(old_context)}};
  return {};
}

Result<std::vector<float>> tensor_as_f32(const GgufFile& file, const GgufTensorInfo& t) {
  uint64_t n = 1;
  for (uint64_t d : t.dims) n *= d;  // the reader bounded the product
  std::vector<float> out(n);
  dequantize_gguf(t.type, file.bytes(t), out);
  return out;
}

}  // namespace

std::optional<GgufArch> gguf_arch_for_model_type(std::string_view model_type) {
  if (model_type == "mistral") model_type = "llama";  // llama.cpp's converter writes Mistral as llama
  for (const ArchInfo& a : kArchs)
    if (model_type == a.model_type) return GgufArch{a.gguf, a.permuted_qk};
  return std::nullopt;
}

std::string gguf_tensor_name(std::string_view hf_name) {
  for (const auto& [gguf, hf] : kGlobalNames)
    if (hf_name == hf) return gguf;
  constexpr std::string_view kPrefix = "model.layers.";
  if (!hf_name.starts_with(kPrefix)) return "";
  const std::string_view rest = hf_name.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 6) return "";
  for (size_t i = 0; i < dot; ++i)
    if (rest[i] < '0' || rest[i] > '9' || (i == 0 && rest[i] == '0' && dot != 1)) return "";
  for (const auto& [gguf, hf] : kLayerNames)
    if (rest.substr(dot + 1) == hf) return "blk." + std::string(rest.substr(0, dot)) + "." + gguf;
  return "";
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

Result<json> gguf_hf_config(const GgufFile& file) {
  const GgufMetadata& m = file.metadata();
  TS_ASSIGN_OR_RETURN(const std::string_view arch_name, m.get_string("general.architecture"));
  const ArchInfo* arch = find_arch(arch_name);
  if (!arch)
    return Status::unsupported("GGUF architecture '" + std::string(arch_name) +
                               "' is not supported (supported: llama, qwen2, qwen3)");
  const Keys k(m, arch->gguf);
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  json c = json::object();
  c["model_type"] = arch->model_type;
  c["hidden_act"] = "silu";
  TS_ASSIGN_OR_RETURN(const int64_t hidden, k.required("embedding_length", 1, kMaxDim));
  TS_ASSIGN_OR_RETURN(const int64_t heads, k.required("attention.head_count", 1, 4096));
  TS_ASSIGN_OR_RETURN(const int64_t kv_heads, k.optional("attention.head_count_kv", 1, 4096, heads));
  const int64_t default_head_dim = hidden % heads == 0 ? hidden / heads : 0;
  TS_ASSIGN_OR_RETURN(const int64_t head_dim, k.optional("attention.key_length", 1, 4096, default_head_dim));
  TS_ASSIGN_OR_RETURN(const int64_t value_dim, k.optional("attention.value_length", 1, 4096, head_dim));
  if (value_dim != head_dim)
    return Status::unsupported("key '" + k.key("attention.value_length") + "' differs from the key length");
  TS_ASSIGN_OR_RETURN(const int64_t rope_dims, k.optional("rope.dimension_count", 1, 4096, head_dim));
  if (rope_dims != head_dim)
    return Status::unsupported("key '" + k.key("rope.dimension_count") + "' = " + std::to_string(rope_dims) +
                               ": partial rotary embeddings are not supported");
  c["hidden_size"] = hidden;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kv_heads;
  if (head_dim) c["head_dim"] = head_dim;
  TS_ASSIGN_OR_RETURN(c["num_hidden_layers"], k.required("block_count", 1, 4096));
  TS_ASSIGN_OR_RETURN(c["intermediate_size"], k.required("feed_forward_length", 1, kMaxDim));
  TS_ASSIGN_OR_RETURN(c["max_position_embeddings"], k.optional("context_length", 1, int64_t{1} << 30, 2048));
  TS_ASSIGN_OR_RETURN(c["rms_norm_eps"], k.optional_float("attention.layer_norm_rms_epsilon", 1e-6));
  TS_ASSIGN_OR_RETURN(const double theta, k.optional_float("rope.freq_base", 10000.0));
  c["rope_theta"] = theta;

  const GgufTensorInfo* embed = file.find("token_embd.weight");
  if (!embed || embed->dims.size() != 2)
    return Status::invalid_input("tensor 'token_embd.weight' is missing or not 2-D");
  TS_ASSIGN_OR_RETURN(c["vocab_size"], k.optional("vocab_size", 1, int64_t{1} << 31, embed->dims[1]));
  c["tie_word_embeddings"] = file.find("output.weight") == nullptr;
  c["attention_bias"] = file.find("blk.0.attn_q.bias") != nullptr;
  c["mlp_bias"] = file.find("blk.0.ffn_gate.bias") != nullptr;

  std::string scaling = "none";
  if (m.find(k.key("rope.scaling.type"))) {
    TS_ASSIGN_OR_RETURN(const std::string_view s, m.get_string(k.key("rope.scaling.type")));
    scaling = s;
  }
  if (scaling == "linear") {
    TS_ASSIGN_OR_RETURN(const double factor, k.optional_float("rope.scaling.factor", 1.0));
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor}};
  } else if (scaling != "none") {
    return Status::unsupported("key '" + k.key("rope.scaling.type") + "' = '" + scaling +
                               "' is not supported (supported: none, linear)");
  }
  if (const GgufTensorInfo* freqs = file.find(kRopeFreqs)) {
    if (scaling != "none") return Status::unsupported("both rope scaling and a rope_freqs tensor");
    TS_ASSIGN_OR_RETURN(const std::vector<float> factors, tensor_as_f32(file, *freqs));
    TS_RETURN_IF_ERROR(llama3_rope_from_factors(factors, theta, head_dim, c));
  }
  return c;
}

Result<std::shared_ptr<const GgufWeights>> GgufWeights::open(const std::string& path) {
  TS_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  std::shared_ptr<GgufWeights> w(new GgufWeights(std::move(file)));
  const GgufMetadata& m = w->file_.metadata();
  TS_ASSIGN_OR_RETURN(const std::string_view arch_name, m.get_string("general.architecture"));
  const ArchInfo* arch = find_arch(arch_name);
  if (!arch)
    return Status::unsupported(path + ": GGUF architecture '" + std::string(arch_name) +
                               "' is not supported (supported: llama, qwen2, qwen3)");
  const Keys k(m, arch->gguf);
  auto blocks = k.required("block_count", 1, 4096);
  if (!blocks.ok()) return blocks.status().with_context(path);
  auto heads = k.required("attention.head_count", 1, 4096);
  if (!heads.ok()) return heads.status().with_context(path);
  auto kv_heads = k.optional("attention.head_count_kv", 1, 4096, *heads);
  if (!kv_heads.ok()) return kv_heads.status().with_context(path);

  for (const GgufTensorInfo& t : w->file_.header().tensors) {
    if (t.name == kRopeFreqs) continue;
    std::string hf;
    for (const auto& [gguf, name] : kGlobalNames)
      if (t.name == gguf) hf = name;
    if (hf.empty()) hf = hf_layer_name(t.name, static_cast<uint64_t>(*blocks));
    if (hf.empty())
      return Status::unsupported(path + ": tensor '" + std::string(t.name) + "' is not part of a " +
                                 std::string(arch_name) + " model that tessera runs");
    Source source{&t, 0};
    if (arch->permuted_qk) {
      if (hf.find("self_attn.q_proj.") != std::string::npos) source.permute_heads = *heads;
      if (hf.find("self_attn.k_proj.") != std::string::npos) source.permute_heads = *kv_heads;
    }
    w->tensors_.emplace(std::move(hf), source);
  }
  return std::shared_ptr<const GgufWeights>(std::move(w));
}

std::vector<std::string> GgufWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [name, source] : tensors_) out.push_back(name);
  return out;
}

Result<TensorView> GgufWeights::get(const std::string& hf_name) const {
  const auto it = tensors_.find(hf_name);
  if (it == tensors_.end()) return Status::not_found("tensor '" + hf_name + "' is not in " + file_.path());
  const GgufTensorInfo& t = *it->second.info;
  TensorView view;
  for (auto d = t.dims.rbegin(); d != t.dims.rend(); ++d) view.shape.push_back(static_cast<int64_t>(*d));
  view.dtype = dtype_of_ggml(t.type);
  const int64_t heads = it->second.permute_heads;
  if (heads == 0) {
    view.data = file_.bytes(t).data();  // in place, quantized blocks included
    return view;
  }
  const int64_t rows = view.shape[0];
  if (rows % (2 * heads) != 0)
    return Status::invalid_input(file_.path() + ": tensor '" + std::string(t.name) + "' has " + std::to_string(rows) +
                                 " rows, not a whole number of row pairs in " + std::to_string(heads) + " heads");

  std::lock_guard<std::mutex> lock(mutex_);
  auto [cached, inserted] = materialized_.try_emplace(hf_name);
  std::vector<uint8_t>& bytes = cached->second;
  if (inserted) {
    // llama.cpp stores row (head, i, half) what Hugging Face has at (head, half, i). A
    // row is a whole number of blocks, so quantized rows move as they are.
    const std::span<const uint8_t> source = file_.bytes(t);
    bytes.resize(source.size());
    const size_t row_bytes = source.size() / static_cast<size_t>(rows);
    const int64_t head_dim = rows / heads, half = head_dim / 2;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = r / head_dim, within = r % head_dim;
      const int64_t from = h * head_dim + (within % half) * 2 + within / half;
      std::memcpy(bytes.data() + r * row_bytes, source.data() + from * row_bytes, row_bytes);
    }
  }
  view.data = bytes.data();
  return view;
}

}  // namespace tessera
