#include "model/forward.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "model/rope.h"

namespace tessera {

Forward::Forward(const Model& model, Device& device)
    : model_(model), device_(device), inv_freq_(rope_inv_freq(model.config().rope, model.config().head_dim)) {}

KvCache Forward::make_cache(int64_t capacity) const {
  const LayerRange r = model_.range();
  return KvCache(model_.config(), r.end - r.begin, capacity);
}

Status Forward::check_room(int64_t tokens, const KvCache& cache) const {
  if (tokens <= 0) return Status::invalid_input("no tokens to run");
  if (cache.length() + tokens > cache.capacity())
    return Status::invalid_input("sequence of " + std::to_string(cache.length() + tokens) +
                                 " tokens exceeds the KV cache capacity of " + std::to_string(cache.capacity()));
  return {};
}

Status Forward::check_ids(std::span<const int32_t> ids) const {
  TS_CHECK(model_.has_entry(), "token ids on a range starting at layer ", model_.range().begin);
  const int64_t vocab = model_.config().vocab_size;
  for (const int32_t id : ids)
    if (id < 0 || id >= vocab)
      return Status::invalid_input("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                   std::to_string(vocab) + ")");
  return {};
}

Result<int64_t> Forward::hidden_rows(std::span<const float> hidden) const {
  TS_CHECK(!model_.has_entry(), "hidden states on a range starting at layer 0");
  const int64_t h = model_.config().hidden_size;
  if (hidden.size() % static_cast<size_t>(h) != 0)
    return Status::invalid_input("hidden states of " + std::to_string(hidden.size()) +
                                 " values are not a multiple of hidden_size " + std::to_string(h));
  return static_cast<int64_t>(hidden.size()) / h;
}

Status Forward::check_parts(std::span<const Part> parts, int64_t tokens) const {
  if (tokens == 0) return Status::invalid_input("no tokens to run");
  int64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    TS_CHECK(parts[i].cache != nullptr, "part ", i, " has no cache");
    TS_RETURN_IF_ERROR(check_room(parts[i].tokens, *parts[i].cache));
    total += parts[i].tokens;
    for (size_t j = 0; j < i; ++j)
      if (parts[j].cache == parts[i].cache) return Status::invalid_input("one sequence twice in a step");
  }
  if (total != tokens)
    return Status::invalid_input(std::to_string(tokens) + " tokens for parts of " + std::to_string(total));
  return {};
}

Result<std::vector<float>> Forward::run_ids(std::span<const int32_t> ids, KvCache& cache, Logits logits) {
  const Part part{&cache, static_cast<int64_t>(ids.size())};
  return embed_and_run(ids, {&part, 1}, logits);
}

Result<std::vector<float>> Forward::run_hidden(std::span<const float> hidden, KvCache& cache, Logits logits) {
  // take_and_run refuses hidden states that are not whole rows before the part is used.
  const Part part{&cache, static_cast<int64_t>(hidden.size()) / model_.config().hidden_size};
  return take_and_run(hidden, {&part, 1}, logits);
}

Result<std::vector<float>> Forward::step_ids(std::span<const int32_t> ids, std::span<const Part> parts) {
  return embed_and_run(ids, parts, Logits::kLast);
}

Result<std::vector<float>> Forward::step_hidden(std::span<const float> hidden, std::span<const Part> parts) {
  return take_and_run(hidden, parts, Logits::kLast);
}

Result<std::vector<float>> Forward::embed_and_run(std::span<const int32_t> ids, std::span<const Part> parts,
                                                  Logits logits) {
  TS_RETURN_IF_ERROR(check_ids(ids));
  TS_RETURN_IF_ERROR(check_parts(parts, static_cast<int64_t>(ids.size())));
  x_.resize(ids.size() * static_cast<size_t>(model_.config().hidden_size));
  device_.embed(model_.weights().embed, ids, x_.data());
  return run_layers(parts, logits);
}

Result<std::vector<float>> Forward::take_and_run(std::span<const float> hidden, std::span<const Part> parts,
                                                 Logits logits) {
  TS_ASSIGN_OR_RETURN(const int64_t tokens, hidden_rows(hidden));
  TS_RETURN_IF_ERROR(check_parts(parts, tokens));
  x_.assign(hidden.begin(), hidden.end());
  return run_layers(parts, logits);
}

std::vector<float> Forward::run_layers(std::span<const Part> parts, Logits logits) {
  const ModelConfig& c = model_.config();
  const int64_t h = c.hidden_size;
  int64_t rows = 0;
  for (const Part& part : parts) rows += part.tokens;
  for (size_t i = 0; i < model_.weights().layers.size(); ++i) run_layer(i, parts, rows);
  for (const Part& part : parts) part.cache->set_length(part.cache->length() + part.tokens);
  if (!model_.has_exit()) return x_;

  // The rows that get logits: all of them, or the last of each part.
  std::vector<float> picked;
  const float* in = x_.data();
  if (logits == Logits::kLast) {
    int64_t end = 0;
    for (const Part& part : parts) {
      end += part.tokens;
      picked.insert(picked.end(), x_.begin() + (end - 1) * h, x_.begin() + end * h);
    }
    rows = static_cast<int64_t>(parts.size());
    in = picked.data();
  }
  norm_.resize(static_cast<size_t>(rows * h));
  device_.rms_norm(in, rows, h, model_.weights().final_norm, static_cast<float>(c.rms_norm_eps), norm_.data());
  std::vector<float> out(static_cast<size_t>(rows * c.vocab_size));  // f32 [rows, vocab]
  device_.matmul(norm_.data(), rows, model_.weights().lm_head, {}, out.data());
  return out;
}

void Forward::run_layer(size_t index, std::span<const Part> parts, int64_t tokens) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[index];
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const int64_t h = c.hidden_size, hd = c.head_dim, heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const auto n = [](int64_t count) { return static_cast<size_t>(count); };

  // Attention block. Shapes: norm_ f32 [tokens, h], q_ [tokens, heads, hd], k_/v_ [tokens, kv_heads, hd].
  norm_.resize(n(tokens * h));
  q_.resize(n(tokens * heads * hd));
  k_.resize(n(tokens * kv_heads * hd));
  v_.resize(n(tokens * kv_heads * hd));
  attn_.resize(n(tokens * heads * hd));
  proj_.resize(n(tokens * h));
  device_.rms_norm(x_.data(), tokens, h, w.attn_norm, eps, norm_.data());
  device_.matmul(norm_.data(), tokens, w.wq, w.bq, q_.data());
  device_.matmul(norm_.data(), tokens, w.wk, w.bk, k_.data());
  device_.matmul(norm_.data(), tokens, w.wv, w.bv, v_.data());
  if (model_.arch().qk_norm) {
    device_.rms_norm(q_.data(), tokens * heads, hd, w.q_norm, eps, q_.data());
    device_.rms_norm(k_.data(), tokens * kv_heads, hd, w.k_norm, eps, k_.data());
  }
  // Positions, the KV cache and attention belong to each sequence.
  const auto layer = static_cast<int64_t>(index);
  const size_t q_row = n(heads * hd), kv_row = n(kv_heads * hd);
  size_t row = 0;
  for (const Part& part : parts) {
    KvCache& cache = *part.cache;
    const int64_t pos0 = cache.length();
    float* q = q_.data() + row * q_row;
    float* k = k_.data() + row * kv_row;
    float* v = v_.data() + row * kv_row;
    device_.rope(q, part.tokens, heads, hd, pos0, inv_freq_);
    device_.rope(k, part.tokens, kv_heads, hd, pos0, inv_freq_);
    std::memcpy(cache.keys(layer) + n(pos0) * kv_row, k, n(part.tokens) * kv_row * sizeof(float));
    std::memcpy(cache.values(layer) + n(pos0) * kv_row, v, n(part.tokens) * kv_row * sizeof(float));
    device_.attention(AttentionArgs{.q = q,
                                    .k_cache = cache.keys(layer),
                                    .v_cache = cache.values(layer),
                                    .out = attn_.data() + row * q_row,
                                    .tokens = part.tokens,
                                    .pos0 = pos0,
                                    .n_heads = heads,
                                    .n_kv_heads = kv_heads,
                                    .head_dim = hd,
                                    .sliding_window = model_.arch().sliding_window,
                                    .scale = 1.0f / std::sqrt(static_cast<float>(hd))});
    row += n(part.tokens);
  }
  device_.matmul(attn_.data(), tokens, w.wo, w.bo, proj_.data());
  device_.add(proj_.data(), tokens * h, x_.data());

  // MLP block: gate_/up_ f32 [tokens, intermediate].
  const int64_t inter = c.intermediate_size;
  gate_.resize(n(tokens * inter));
  up_.resize(n(tokens * inter));
  device_.rms_norm(x_.data(), tokens, h, w.ffn_norm, eps, norm_.data());
  device_.matmul(norm_.data(), tokens, w.w_gate, w.b_gate, gate_.data());
  device_.matmul(norm_.data(), tokens, w.w_up, w.b_up, up_.data());
  device_.silu_mul(gate_.data(), up_.data(), tokens * inter, gate_.data());
  device_.matmul(gate_.data(), tokens, w.w_down, w.b_down, proj_.data());
  device_.add(proj_.data(), tokens * h, x_.data());
}

}  // namespace tessera
