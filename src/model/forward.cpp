#include "model/forward.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

#include "core/check.h"
#include "model/rope.h"

namespace tessera {

namespace {

size_t floats(int64_t count) { return static_cast<size_t>(count) * sizeof(float); }

// Grows `buffer` on `device` to at least `count` floats.
Status reserve(Device& device, Buffer& buffer, int64_t count) {
  if (buffer.bytes() >= floats(count)) return {};
  buffer = Buffer();  // free first: the old contents are not needed
  TS_ASSIGN_OR_RETURN(buffer, device.alloc(floats(count)));
  return {};
}

// The model's weights as `device` places them (views of the mapped files on the
// CPU; copies in its own memory on a GPU, with a progress line on a terminal).
// A weight that does not fit is named in the error.
Result<ModelWeights> place_weights(Device& device, const Model& model) {
  const ModelWeights& host = model.weights();
  ModelWeights placed = host;
  const bool show = device.name().rfind("cpu", 0) != 0 && ::isatty(STDERR_FILENO);
  const double total_gib = static_cast<double>(model.weight_bytes()) / (1 << 30);
  size_t done = 0;
  auto place = [&](TensorView& view, const std::string& what) -> Status {
    if (view.empty()) return {};
    auto moved = device.place(view);
    if (!moved.ok()) return moved.status().with_context("loading " + what + " onto " + device.name());
    done += view.nbytes();
    view = *moved;
    if (show)
      std::fprintf(stderr, "\r[load] %s: %.2f of %.2f GiB", device.name().c_str(),
                   static_cast<double>(done) / (1 << 30), total_gib);
    return {};
  };
  TS_RETURN_IF_ERROR(place(placed.embed, "the embedding"));
  for (size_t i = 0; i < placed.layers.size(); ++i) {
    const int64_t layer = model.range().begin + static_cast<int64_t>(i);
    for (const LayerTensor& t : layer_tensors(model.config(), model.arch(), layer))
      TS_RETURN_IF_ERROR(place(t.in(placed.layers[i]), "layer " + std::to_string(layer) + "'s " + t.name));
  }
  TS_RETURN_IF_ERROR(place(placed.final_norm, "the final norm"));
  if (host.lm_head.data == host.embed.data) {
    placed.lm_head = placed.embed;
  } else {
    TS_RETURN_IF_ERROR(place(placed.lm_head, "the LM head"));
  }
  if (show) std::fprintf(stderr, "\n");
  return placed;
}

}  // namespace

DType default_kv_dtype(const Model& model) {
  TS_CHECK(!model.weights().layers.empty(), "a model range without layers has no KV cache");
  return model.weights().layers.front().wk.dtype;
}

Forward::Forward(const Model& model, Device& device, ForwardOptions options)
    : model_(model), device_(device), group_(std::move(options.group)) {
  const ModelConfig& c = model.config();
  status_ = [&]() -> Status {
    if (group_.size() != 1)
      return Status::unsupported("[forward] tensor parallelism (a group of " + std::to_string(group_.size()) +
                                 " ranks) is not implemented yet");
    TS_ASSIGN_OR_RETURN(weights_, place_weights(device, model));
    const std::vector<float> inv_freq = rope_inv_freq(c.rope, c.head_dim);
    TS_ASSIGN_OR_RETURN(inv_freq_, device.alloc(floats(static_cast<int64_t>(inv_freq.size()))));
    device.upload(inv_freq.data(), floats(static_cast<int64_t>(inv_freq.size())), inv_freq_.data());
    const LayerRange r = model.range();
    TS_ASSIGN_OR_RETURN(kv_pool_, KvPool::create(device, {r.end - r.begin, c.num_key_value_heads, c.head_dim},
                                                 {.budget_bytes = options.kv_memory,
                                                  .dtype = options.kv_dtype.value_or(default_kv_dtype(model)),
                                                  .block_size = options.kv_block_size}));
    return {};
  }();
}

KvPool& Forward::kv_pool() const {
  TS_CHECK(kv_pool_ != nullptr, "Forward has no KV pool: ", status_.to_string());
  return *kv_pool_;
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

Status Forward::prepare_parts(std::span<const Part> parts, int64_t tokens) {
  TS_RETURN_IF_ERROR(status_);
  if (tokens == 0) return Status::invalid_input("no tokens to run");
  int64_t total = 0, blocks = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const KvCache* cache = parts[i].cache;
    TS_CHECK(cache != nullptr, "part ", i, " has no cache");
    TS_CHECK(&cache->pool() == kv_pool_.get(), "part ", i, "'s cache is not in this Forward's KV pool");
    if (parts[i].tokens <= 0) return Status::invalid_input("no tokens to run");
    if (cache->length() + parts[i].tokens > cache->capacity())
      return Status::invalid_input("sequence of " + std::to_string(cache->length() + parts[i].tokens) +
                                   " tokens exceeds the KV cache capacity of " + std::to_string(cache->capacity()));
    total += parts[i].tokens;
    blocks += cache->blocks_needed(parts[i].tokens);
    for (size_t j = 0; j < i; ++j)
      if (parts[j].cache == cache) return Status::invalid_input("one sequence twice in a step");
  }
  if (total != tokens)
    return Status::invalid_input(std::to_string(tokens) + " tokens for parts of " + std::to_string(total));
  TS_RETURN_IF_ERROR(kv_pool_->check_free(blocks));
  TS_RETURN_IF_ERROR(prepare_scratch(tokens));
  for (const Part& part : parts) part.cache->prepare(part.tokens);
  return {};
}

Status Forward::prepare_scratch(int64_t tokens) {
  const ModelConfig& c = model_.config();
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  for (auto [buffer, width] : {std::pair{&x_, c.hidden_size},
                               {&norm_, c.hidden_size},
                               {&q_, q},
                               {&k_, kv},
                               {&v_, kv},
                               {&attn_, q},
                               {&proj_, c.hidden_size},
                               {&gate_, c.intermediate_size},
                               {&up_, c.intermediate_size}})
    TS_RETURN_IF_ERROR(reserve(device_, *buffer, tokens * width));
  if (model_.has_exit()) TS_RETURN_IF_ERROR(reserve(device_, logits_, tokens * c.vocab_size));
  if (model_.arch().moe.experts > 0)
    TS_RETURN_IF_ERROR(moe_.reserve(device_, c.hidden_size, model_.arch().moe, tokens));
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
  const auto tokens = static_cast<int64_t>(ids.size());
  TS_RETURN_IF_ERROR(prepare_parts(parts, tokens));
  device_.embed(weights_.embed, ids, x_.f32());
  return run_layers(parts, tokens, logits);
}

Result<std::vector<float>> Forward::take_and_run(std::span<const float> hidden, std::span<const Part> parts,
                                                 Logits logits) {
  TS_ASSIGN_OR_RETURN(const int64_t tokens, hidden_rows(hidden));
  TS_RETURN_IF_ERROR(prepare_parts(parts, tokens));
  device_.upload(hidden.data(), hidden.size_bytes(), x_.data());
  return run_layers(parts, tokens, logits);
}

Result<std::vector<float>> Forward::run_layers(std::span<const Part> parts, int64_t tokens, Logits logits) {
  const ModelConfig& c = model_.config();
  const int64_t h = c.hidden_size;
  for (size_t i = 0; i < weights_.layers.size(); ++i) run_layer(i, parts, tokens);
  for (const Part& part : parts) part.cache->advance(part.tokens);
  if (!model_.has_exit()) {
    std::vector<float> hidden(static_cast<size_t>(tokens * h));  // f32 [tokens, hidden]
    device_.download(x_.data(), hidden.size() * sizeof(float), hidden.data());
    return hidden;
  }
  // The rows that get logits: all of them, or the last of each part (gathered to the front of norm_).
  int64_t rows = tokens;
  const float* in = x_.f32();
  if (logits == Logits::kLast) {
    int64_t end = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      end += parts[i].tokens;
      device_.copy(x_.f32() + (end - 1) * h, floats(h), norm_.f32() + static_cast<int64_t>(i) * h);
    }
    rows = static_cast<int64_t>(parts.size());
    in = norm_.f32();
  }
  device_.rms_norm(in, rows, h, weights_.final_norm, static_cast<float>(c.rms_norm_eps), norm_.f32());
  device_.matmul(norm_.f32(), rows, weights_.lm_head, {}, logits_.f32());
  std::vector<float> out(static_cast<size_t>(rows * c.vocab_size));  // f32 [rows, vocab]
  device_.download(logits_.data(), out.size() * sizeof(float), out.data());
  return out;
}

void Forward::run_layer(size_t index, std::span<const Part> parts, int64_t tokens) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = weights_.layers[index];
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const int64_t h = c.hidden_size, hd = c.head_dim, heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  float *x = x_.f32(), *norm = norm_.f32(), *q = q_.f32(), *k = k_.f32(), *v = v_.f32();
  float *attn = attn_.f32(), *proj = proj_.f32(), *gate = gate_.f32(), *up = up_.f32();

  // Attention block. Shapes: norm f32 [tokens, h], q [tokens, heads, hd], k/v [tokens, kv_heads, hd].
  device_.rms_norm(x, tokens, h, w.attn_norm, eps, norm);
  const Device::Projection qkv[] = {{&w.wq, &w.bq, q}, {&w.wk, &w.bk, k}, {&w.wv, &w.bv, v}};
  device_.matmuls(norm, tokens, qkv);
  if (model_.arch().qk_norm) {
    device_.rms_norm(q, tokens * heads, hd, w.q_norm, eps, q);
    device_.rms_norm(k, tokens * kv_heads, hd, w.k_norm, eps, k);
  }
  // Positions, the KV cache and attention belong to each sequence.
  std::vector<SeqSlice> slices;
  slices.reserve(parts.size());
  for (const Part& part : parts) slices.push_back({part.tokens, part.cache->length(), part.cache->blocks()});
  const auto layer = static_cast<int64_t>(index);
  device_.attend(AttendArgs{.q = q,
                            .k = k,
                            .v = v,
                            .out = attn,
                            .pages = &kv_pool_->pages(),
                            .layer = layer,
                            .parts = slices,
                            .n_heads = heads,
                            .sliding_window = model_.arch().window(layer),
                            .scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                            .inv_freq = inv_freq_.f32()});
  device_.matmul_add(attn, tokens, w.wo, w.bo, proj, x);

  // MLP block: gate/up f32 [tokens, intermediate], or the experts (moe.h).
  device_.rms_norm(x, tokens, h, w.ffn_norm, eps, norm);
  if (model_.arch().has_experts(model_.range().begin + layer)) {
    moe_.run(device_, w, model_.arch().moe, norm, tokens, h, proj);
    device_.add(proj, tokens * h, x);
    return;
  }
  device_.gate_up(norm, tokens, w.w_gate, w.b_gate, w.w_up, w.b_up, up, gate);
  device_.matmul_add(gate, tokens, w.w_down, w.b_down, proj, x);
}

}  // namespace tessera
