#include "model/forward.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/mapped_file.h"
#include "model/rope.h"
#include "wire/tp_step.h"

namespace tessera {

namespace {

size_t floats(int64_t count) { return static_cast<size_t>(count) * sizeof(float); }

// Host words as the bytes a collective moves (as f32: broadcast moves them unchanged).
template <typename T>
std::span<uint8_t> bytes_of(std::vector<T>& v) {
  static_assert(sizeof(T) == 4);
  return {reinterpret_cast<uint8_t*>(v.data()), v.size() * sizeof(T)};
}

std::string rank_of(Shard s) { return "rank " + std::to_string(s.rank) + " of " + std::to_string(s.ranks); }

// Grows `buffer` on `device` to at least `count` floats.
Status reserve(Device& device, Buffer& buffer, int64_t count) {
  if (buffer.bytes() >= floats(count)) return {};
  buffer = Buffer();  // free first: the old contents are not needed
  TS_ASSIGN_OR_RETURN(buffer, device.alloc(floats(count)));
  return {};
}

// `value` rounded to `dtype` (and back to f32).
float round_to(DType dtype, float value) {
  if (dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(value));
  if (dtype == DType::kF16) return f16_to_f32(f32_to_f16(value));
  return value;
}

// An element of a weight as f32.
float element(const TensorView& t, int64_t i) {
  const auto* bytes = static_cast<const uint8_t*>(t.data);
  switch (t.dtype) {
    case DType::kF32: return reinterpret_cast<const float*>(bytes)[i];
    case DType::kBF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes)[i]);
    default: return f16_to_f32(reinterpret_cast<const uint16_t*>(bytes)[i]);
  }
}

// A norm weight w as the f32 (offset + w) it acts as (Gemma's norms: 1 + w, as
// transformers computes it, in f32), in a device buffer kept in `owned`.
Result<TensorView> place_offset_norm(Device& device, const TensorView& w, float offset, std::vector<Buffer>& owned) {
  std::vector<float> values(static_cast<size_t>(w.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = offset + element(w, static_cast<int64_t>(i));
  TS_ASSIGN_OR_RETURN(Buffer buffer, device.alloc(values.size() * sizeof(float)));
  device.upload(values.data(), values.size() * sizeof(float), buffer.data());
  TensorView view{DType::kF32, w.shape, buffer.data()};
  owned.push_back(std::move(buffer));
  return view;
}

// The model's weights as `device` places them (on the CPU, copies in its matmuls'
// layout, or views of the mapped files; copies in its own memory on a GPU, with a progress
// line on a terminal).
// A weight that does not fit is named in the error. Norm weights of a family
// with ArchSpec::norm_offset become f32 buffers kept in `owned`. `copied`: the bytes
// placed as copies (the mapped files' pages of each are released: release_mapped_pages).
Result<ModelWeights> place_weights(Device& device, const Model& model, std::vector<Buffer>& owned, uint64_t& copied) {
  const ModelWeights& host = model.weights();
  ModelWeights placed = host;
  const bool show = device.name().rfind("cpu", 0) != 0 && ::isatty(STDERR_FILENO);
  const double total_gib = static_cast<double>(model.weight_bytes()) / (1 << 30);
  size_t done = 0;
  const float offset = model.arch().norm_offset;
  auto place = [&](TensorView& view, const std::string& what, bool norm = false) -> Status {
    if (view.empty()) return {};
    auto moved = norm && offset != 0 ? place_offset_norm(device, view, offset, owned) : device.place(view);
    if (!moved.ok()) return moved.status().with_context("loading " + what + " onto " + device.name());
    done += view.nbytes();
    // A copy (the CPU's own layout, a GPU's memory): the mapped file's pages of it need not stay resident.
    if (moved->data != view.data) {
      copied += moved->nbytes();
      release_mapped_pages(view.data, view.nbytes());
    }
    view = *moved;
    if (show)
      std::fprintf(stderr, "\r[load] %s: %.2f of %.2f GiB", device.name().c_str(),
                   static_cast<double>(done) / (1 << 30), total_gib);
    return {};
  };
  TS_RETURN_IF_ERROR(place(placed.embed, "the embedding"));
  for (size_t i = 0; i < placed.layers.size(); ++i) {
    const int64_t layer = model.range().begin + static_cast<int64_t>(i);
    for (const LayerTensor& t : layer_tensors(model.layer_config(), model.arch(), layer)) {
      LayerWeights& weights = placed.layers[i];
      const std::string what = "layer " + std::to_string(layer) + "'s " + t.name;
      if (t.parts.empty()) {
        TS_RETURN_IF_ERROR(place(t.in(weights), what, t.norm));
        continue;
      }
      // A fused tensor (q, k and v; gate and up): its parts, which the host already holds as
      // views of its rows, each placed as a weight of its own (a device may lay each out
      // anew: CpuDevice::place).
      t.in(weights) = {};
      for (const auto& part : t.parts) TS_RETURN_IF_ERROR(place(weights.*part.first, what));
    }
  }
  TS_RETURN_IF_ERROR(place(placed.final_norm, "the final norm", true));
  if (host.lm_head_is_embed()) {
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
  const DType weights = model.weights().layers.front().wk.dtype;
  return dtype_is_quantized(weights) ? DType::kF16 : weights;
}

Forward::Forward(const Model& model, Device& device, ForwardOptions options)
    : model_(model), device_(device), group_(std::move(options.group)), tp_(group_.size() > 1) {
  const ModelConfig& c = model.config();
  Status local = [&]() -> Status {
    const Shard shard = model.shard();
    if (group_.size() != shard.ranks || group_.rank() != shard.rank)
      return Status::invalid_input("[forward] the model is the shard of " + rank_of(shard) + ", the group's is " +
                                   rank_of({group_.rank(), group_.size()}));
    TS_ASSIGN_OR_RETURN(weights_, place_weights(device, model, owned_, copied_weight_bytes_));
    const ArchSpec& arch = model.arch();
    const int64_t rotary_dim = arch.rotary_dim(c.head_dim);
    auto upload = [&](const RopeConfig& rope, bool long_factors, Buffer& out) -> Status {
      const std::vector<float> inv_freq = rope_inv_freq(rope, rotary_dim, long_factors);
      TS_ASSIGN_OR_RETURN(out, device.alloc(floats(static_cast<int64_t>(inv_freq.size()))));
      device.upload(inv_freq.data(), floats(static_cast<int64_t>(inv_freq.size())), out.data());
      return {};
    };
    TS_RETURN_IF_ERROR(upload(c.rope, false, inv_freq_));
    if (c.rope.type == RopeType::kLongRope) TS_RETURN_IF_ERROR(upload(c.rope, true, long_inv_freq_));
    if (arch.sliding_rope) TS_RETURN_IF_ERROR(upload(*arch.sliding_rope, false, local_inv_freq_));
    return {};
  }();
  status_ = make_kv_pool(options, std::move(local));
}

Status Forward::make_kv_pool(const ForwardOptions& options, Status local) {
  const LayerRange r = model_.range();
  const KvPool::Geometry geometry{r.end - r.begin, model_.layer_config().num_key_value_heads, model_.config().head_dim};
  KvPoolOptions pool{.budget_bytes = options.kv_memory,
                     .dtype = options.kv_dtype.value_or(default_kv_dtype(model_)),
                     .block_size = options.kv_block_size};
  auto create = [&]() -> Status {
    TS_ASSIGN_OR_RETURN(kv_pool_, KvPool::create(device_, geometry, pool));
    return {};
  };
  if (!tp_) return local.ok() ? create() : local;
  // The leader's pool decides: blocks, block size, dtype (0 blocks: it failed).
  std::vector<uint32_t> words(3, 0);
  if (group_.rank() == 0) {
    if (local.ok()) local = create();
    if (local.ok())
      words = {static_cast<uint32_t>(kv_pool_->total_blocks()), static_cast<uint32_t>(kv_pool_->block_size()),
               static_cast<uint32_t>(kv_pool_->pages().dtype)};
  }
  // Each wait below is bounded by the group's progress timeout: a rank that
  // never sets up its Forward fails every other rank's setup, named.
  const std::string setting_up = "[forward] setting up the group's Forwards";
  TS_RETURN_IF_ERROR(timed([&] { return group_.broadcast(bytes_of(words), DType::kF32, 0); }).with_context(setting_up));
  if (group_.rank() != 0 && local.ok()) {
    if (words[0] == 0) {
      local = Status::internal("[forward] the leader (rank 0) could not set up its Forward");
    } else {
      pool.dtype = static_cast<DType>(words[2]);
      pool.block_size = words[1];
      const KvPages shape{.dtype = pool.dtype,
                          .block_size = pool.block_size,
                          .layers = geometry.layers,
                          .n_kv_heads = geometry.n_kv_heads,
                          .head_dim = geometry.head_dim};
      pool.budget_bytes = words[0] * shape.block_bytes();
      local = create();
    }
  }
  // Every rank learns whether every other one is ready, and runs the leader's layers.
  const LayerRange mine = model_.range();
  std::vector<uint32_t> state = {local.ok() ? 0u : 1u, static_cast<uint32_t>(mine.begin),
                                 static_cast<uint32_t>(mine.end)};
  std::vector<uint32_t> all(state.size() * static_cast<size_t>(group_.size()));
  TS_RETURN_IF_ERROR(
      timed([&] { return group_.all_gather(bytes_of(state), bytes_of(all), DType::kF32); }).with_context(setting_up));
  if (!local.ok()) return local;
  std::string failed;
  bool broken = false;  // a rank failed (else only ranges differ: the operator's mistake)
  for (int rank = 0; rank < group_.size(); ++rank) {
    const uint32_t* s = all.data() + 3 * static_cast<size_t>(rank);
    if (s[0] != 0) {
      broken = true;
      failed += "; rank " + std::to_string(rank) + " could not set up its Forward";
    } else if (s[1] != all[1] || s[2] != all[2]) {
      failed += "; rank " + std::to_string(rank) + " holds layers [" + std::to_string(s[1]) + ", " +
                std::to_string(s[2]) + "), the leader (rank 0) [" + std::to_string(all[1]) + ", " +
                std::to_string(all[2]) + ")";
    }
  }
  if (failed.empty()) return {};
  const std::string message = "[forward] the group cannot run" + failed;
  return broken ? Status::internal(message) : Status::invalid_input(message);
}

Forward::~Forward() {
  // Releases the followers; a failed group cannot, and they learn of it anyway.
  if (tp_ && group_.rank() == 0 && status_.ok() && group_.failure().ok()) {
    std::vector<uint8_t> stop = wire::encode_tp_stop();
    (void)group_.broadcast(stop, DType::kF32, 0);
  }
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

Status Forward::prepare_parts(std::span<const Part> parts, int64_t tokens, std::vector<BlockCopy>& copies) {
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
  for (const Part& part : parts) {
    // A block prepare replaced is a copy-on-write, which the followers repeat.
    const std::vector<int32_t> before(part.cache->blocks().begin(), part.cache->blocks().end());
    part.cache->prepare(part.tokens);
    for (size_t b = 0; b < before.size(); ++b)
      if (part.cache->blocks()[b] != before[b]) copies.emplace_back(before[b], part.cache->blocks()[b]);
  }
  return {};
}

Status Forward::prepare_scratch(int64_t tokens) {
  const ModelConfig& c = model_.layer_config();
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
  if (model_.has_exit()) TS_RETURN_IF_ERROR(reserve(device_, logits_, tokens * weights_.lm_head.dim(0)));
  if (model_.arch().moe.experts > 0)
    TS_RETURN_IF_ERROR(moe_.reserve(device_, c.hidden_size, model_.arch().moe, tokens));
  return {};
}

Result<std::vector<float>> Forward::run_ids(std::span<const int32_t> ids, KvCache& cache, Logits logits) {
  TS_CHECK(logits != Logits::kGreedy, "run_ids returns logits (step_greedy returns tokens)");
  const Part part{&cache, static_cast<int64_t>(ids.size())};
  TS_ASSIGN_OR_RETURN(Output out, embed_and_run(ids, {&part, 1}, logits));
  return std::move(out.values);
}

Result<std::vector<float>> Forward::run_hidden(std::span<const float> hidden, KvCache& cache, Logits logits) {
  TS_CHECK(logits != Logits::kGreedy, "run_hidden returns logits or hidden states");
  // take_and_run refuses hidden states that are not whole rows before the part is used.
  const Part part{&cache, static_cast<int64_t>(hidden.size()) / model_.config().hidden_size};
  TS_ASSIGN_OR_RETURN(Output out, take_and_run(hidden, {&part, 1}, logits));
  return std::move(out.values);
}

Result<std::vector<float>> Forward::step_ids(std::span<const int32_t> ids, std::span<const Part> parts) {
  TS_ASSIGN_OR_RETURN(Output out, embed_and_run(ids, parts, Logits::kLast));
  return std::move(out.values);
}

Result<std::vector<float>> Forward::step_hidden(std::span<const float> hidden, std::span<const Part> parts) {
  TS_ASSIGN_OR_RETURN(Output out, take_and_run(hidden, parts, Logits::kLast));
  return std::move(out.values);
}

Result<std::vector<int32_t>> Forward::step_greedy(std::span<const int32_t> ids, std::span<const Part> parts) {
  TS_RETURN_IF_ERROR(launch_greedy(ids, parts));
  return greedy_tokens();
}

Status Forward::launch_greedy(std::span<const int32_t> ids, std::span<const Part> parts) {
  TS_CHECK(model_.has_exit(), "greedy tokens from a range ending at layer ", model_.range().end);
  TS_CHECK(!launched_, "a greedy step launched before the last one's tokens were taken");
  TS_ASSIGN_OR_RETURN(Output out, embed_and_run(ids, parts, Logits::kGreedy));
  launched_ = std::move(out);
  return {};
}

Result<std::vector<int32_t>> Forward::greedy_tokens() {
  TS_CHECK(launched_, "greedy tokens taken before a greedy step was launched");
  Output out = std::move(*launched_);
  launched_.reset();
  if (out.on_device > 0) {  // the wait: the download follows the pass on the device
    out.tokens.resize(static_cast<size_t>(out.on_device));
    device_.download(greedy_.data(), out.tokens.size() * sizeof(int32_t), out.tokens.data());
  }
  return std::move(out.tokens);
}

namespace {

// Each part's positions and block table, the same for every layer of the step.
std::vector<SeqSlice> slices_of(std::span<const Forward::Part> parts) {
  std::vector<SeqSlice> slices;
  slices.reserve(parts.size());
  for (const Forward::Part& part : parts) slices.push_back({part.tokens, part.cache->length(), part.cache->blocks()});
  return slices;
}

}  // namespace

Result<Forward::Output> Forward::embed_and_run(std::span<const int32_t> ids, std::span<const Part> parts,
                                               Logits logits) {
  TS_RETURN_IF_ERROR(check_ids(ids));
  TS_CHECK(!tp_ || group_.rank() == 0, "a step run on rank ", group_.rank(), " of a TP group (followers follow())");
  std::vector<BlockCopy> copies;
  TS_RETURN_IF_ERROR(prepare_parts(parts, static_cast<int64_t>(ids.size()), copies));
  const std::vector<SeqSlice> slices = slices_of(parts);
  if (tp_) TS_RETURN_IF_ERROR(lead(ids, {}, slices, copies, logits));
  begin_step(slices);
  auto out = embed_and_compute(ids, slices, logits);
  device_.end_step();
  if (out.ok())
    for (const Part& part : parts) part.cache->advance(part.tokens);
  return out;
}

Result<Forward::Output> Forward::take_and_run(std::span<const float> hidden, std::span<const Part> parts,
                                              Logits logits) {
  TS_CHECK(!tp_ || group_.rank() == 0, "a step run on rank ", group_.rank(), " of a TP group (followers follow())");
  TS_ASSIGN_OR_RETURN(const int64_t tokens, hidden_rows(hidden));
  std::vector<BlockCopy> copies;
  TS_RETURN_IF_ERROR(prepare_parts(parts, tokens, copies));
  const std::vector<SeqSlice> slices = slices_of(parts);
  if (tp_) TS_RETURN_IF_ERROR(lead({}, hidden, slices, copies, logits));
  device_.upload(hidden.data(), hidden.size_bytes(), x_.data());
  begin_step(slices);
  auto out = run_layers(slices, tokens, logits);
  device_.end_step();
  if (out.ok())
    for (const Part& part : parts) part.cache->advance(part.tokens);
  return out;
}

void Forward::begin_step(std::span<const SeqSlice> slices) {
  // Decode steps only (a token a part): they repeat their shapes step after
  // step, so the device replays one recording with new positions, where a
  // prompt's step would record a new one. A TP step's sums go between ranks.
  const bool decode = std::all_of(slices.begin(), slices.end(), [](const SeqSlice& s) { return s.tokens == 1; });
  if (decode && !tp_) device_.begin_step();
}

template <typename Call>
Status Forward::timed(Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  Status status = call();
  collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return status;
}

Status Forward::lead(std::span<const int32_t> ids, std::span<const float> hidden, std::span<const SeqSlice> slices,
                     std::span<const BlockCopy> copies, Logits logits) {
  wire::TpStep step;
  step.all_logits = logits == Logits::kAll;
  step.input = model_.has_entry() ? wire::TpStepInput::kIds : wire::TpStepInput::kHidden;
  step.ids.assign(ids.begin(), ids.end());
  for (const SeqSlice& slice : slices)
    step.parts.push_back({static_cast<int32_t>(slice.tokens), static_cast<int32_t>(slice.pos0),
                          std::vector<int32_t>(slice.blocks.begin(), slice.blocks.end())});
  step.copies.assign(copies.begin(), copies.end());
  std::vector<uint8_t> header = wire::encode_tp_step_header(step), body = wire::encode_tp_step_body(step);
  return timed([&]() -> Status {
    TS_RETURN_IF_ERROR(group_.broadcast(header, DType::kF32, 0));
    TS_RETURN_IF_ERROR(group_.broadcast(body, DType::kF32, 0));
    if (hidden.empty()) return Status{};
    // Broadcast writes the root's buffer back unchanged; the caller's span is const.
    host_.assign(hidden.begin(), hidden.end());
    return group_.broadcast(bytes_of(host_), DType::kF32, 0);
  });
}

Status Forward::follow() {
  TS_RETURN_IF_ERROR(status_);
  TS_CHECK(tp_ && group_.rank() != 0, "follow() on rank ", group_.rank(), " of ", group_.size());
  const KvPages& pages = kv_pool_->pages();
  const wire::TpStepLimits limits{
      .max_tokens = static_cast<uint32_t>(pages.blocks * pages.block_size),
      .blocks = static_cast<uint32_t>(pages.blocks),
      .block_size = static_cast<uint32_t>(pages.block_size),
      .vocab = static_cast<uint32_t>(model_.config().vocab_size),
      .hidden_size = model_.has_entry() ? 0u : static_cast<uint32_t>(model_.config().hidden_size)};
  std::vector<uint8_t> header(wire::kTpStepHeaderBytes), body;
  for (;;) {
    // The leader's next step may come after any idle time (a chat's user, an idle server).
    TS_RETURN_IF_ERROR(timed([&] { return group_.broadcast(header, DType::kF32, 0, Wait::kWhileAlive); }));
    TS_ASSIGN_OR_RETURN(const wire::TpStepHeader h, wire::decode_tp_step_header(header, limits));
    if (h.kind == wire::TpStepKind::kStop) return {};
    body.resize(h.body_bytes());
    TS_RETURN_IF_ERROR(timed([&] { return group_.broadcast(body, DType::kF32, 0); }));
    TS_ASSIGN_OR_RETURN(const wire::TpStep step, wire::decode_tp_step_body(h, body, limits));
    const auto tokens = static_cast<int64_t>(h.tokens);
    TS_RETURN_IF_ERROR(prepare_scratch(tokens));
    if (h.input == wire::TpStepInput::kHidden) {  // f32 [tokens, hidden], its length derived here
      host_.resize(h.hidden_bytes(limits.hidden_size) / sizeof(float));
      TS_RETURN_IF_ERROR(timed([&] { return group_.broadcast(bytes_of(host_), DType::kF32, 0); }));
      device_.upload(host_.data(), floats(static_cast<int64_t>(host_.size())), x_.data());
    }
    auto* base = static_cast<uint8_t*>(pages.base);
    for (const auto& [from, to] : step.copies)
      device_.copy(base + static_cast<size_t>(from) * pages.block_bytes(), pages.block_bytes(),
                   base + static_cast<size_t>(to) * pages.block_bytes());
    std::vector<SeqSlice> slices;
    for (const wire::TpStepPart& part : step.parts) slices.push_back({part.tokens, part.pos0, part.blocks});
    const Logits logits = step.all_logits ? Logits::kAll : Logits::kLast;
    if (h.input == wire::TpStepInput::kHidden) {
      TS_RETURN_IF_ERROR(run_layers(slices, tokens, logits).status());
    } else {
      TS_RETURN_IF_ERROR(embed_and_compute(step.ids, slices, logits).status());
    }
  }
}

Result<Forward::Output> Forward::embed_and_compute(std::span<const int32_t> ids, std::span<const SeqSlice> slices,
                                                   Logits logits) {
  const auto tokens = static_cast<int64_t>(ids.size());
  device_.embed(weights_.embed, ids, x_.f32());
  if (model_.arch().scale_embeddings) {
    // sqrt(hidden) rounded to the embedding's dtype, as transformers multiplies in it.
    const auto factor = static_cast<float>(std::sqrt(static_cast<double>(model_.config().hidden_size)));
    device_.scale(x_.f32(), tokens * model_.config().hidden_size, round_to(weights_.embed.dtype, factor));
  }
  return run_layers(slices, tokens, logits);
}

Result<Forward::Output> Forward::run_layers(std::span<const SeqSlice> slices, int64_t tokens, Logits logits) {
  const ModelConfig& c = model_.config();
  const int64_t h = c.hidden_size;
  for (size_t i = 0; i < weights_.layers.size(); ++i) TS_RETURN_IF_ERROR(run_layer(i, slices, tokens));
  if (!model_.has_exit()) {
    if (tp_ && group_.rank() != 0) return Output{};              // every rank holds them; the leader hands them on
    std::vector<float> hidden(static_cast<size_t>(tokens * h));  // f32 [tokens, hidden]
    device_.download(x_.data(), hidden.size() * sizeof(float), hidden.data());
    return Output{.values = std::move(hidden)};
  }
  // The rows that get logits: all of them, or the last of each part (gathered to the front of norm_).
  int64_t rows = tokens;
  const float* in = x_.f32();
  if (logits != Logits::kAll) {
    int64_t end = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      end += slices[i].tokens;
      device_.copy(x_.f32() + (end - 1) * h, floats(h), norm_.f32() + static_cast<int64_t>(i) * h);
    }
    rows = static_cast<int64_t>(slices.size());
    in = norm_.f32();
  }
  device_.rms_norm(in, rows, h, weights_.final_norm, static_cast<float>(c.rms_norm_eps), norm_.f32());
  return logits_of(rows, logits);
}

Result<Forward::Output> Forward::logits_of(int64_t rows, Logits logits) {
  const int64_t vocab = model_.config().vocab_size;
  device_.matmul(norm_.f32(), rows, weights_.lm_head, {}, logits_.f32());  // f32 [rows, own]
  const auto cap = static_cast<float>(model_.arch().final_softcap);
  if (logits == Logits::kGreedy && !tp_ && cap == 0) {  // chosen on the device: only the ids leave it
    TS_RETURN_IF_ERROR(reserve(device_, greedy_, rows));
    auto* ids = static_cast<int32_t*>(greedy_.data());
    device_.argmax(logits_.f32(), rows, vocab, ids);
    return Output{.on_device = rows};  // greedy_tokens() downloads them once the pass is done
  }
  Output out;
  TS_ASSIGN_OR_RETURN(out.values, gather_logits(rows));
  if (cap > 0)
    for (float& logit : out.values) logit = std::tanh(logit / cap) * cap;
  if (logits == Logits::kGreedy) {  // gathered over the ranks, or soft-capped: chosen here
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = out.values.begin() + r * vocab;
      out.tokens.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
    out.values.clear();
  }
  return out;
}

Result<std::vector<float>> Forward::gather_logits(int64_t rows) {
  const int64_t vocab = model_.config().vocab_size, own = weights_.lm_head.dim(0);
  std::vector<float> out(static_cast<size_t>(rows * (tp_ ? 0 : vocab)));  // f32 [rows, vocab]
  if (!tp_) {
    device_.download(logits_.data(), out.size() * sizeof(float), out.data());
    return out;
  }
  // Each rank's rows of the vocabulary, padded to the chunk, gathered in rank order.
  const int64_t chunk = (vocab + group_.size() - 1) / group_.size();
  host_.assign(static_cast<size_t>(rows * chunk), 0.0f);
  for (int64_t r = 0; r < rows; ++r) device_.download(logits_.f32() + r * own, floats(own), host_.data() + r * chunk);
  gathered_.resize(host_.size() * static_cast<size_t>(group_.size()));
  TS_RETURN_IF_ERROR(timed([&] { return group_.all_gather(bytes_of(host_), bytes_of(gathered_), DType::kF32); }));
  out.resize(static_cast<size_t>(rows * vocab));
  for (int rank = 0; rank < group_.size(); ++rank) {
    const int64_t begin = rank * chunk, width = std::min(chunk, vocab - begin);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out.data() + r * vocab + begin, gathered_.data() + (rank * rows + r) * chunk, floats(width));
  }
  return out;
}

Status Forward::sum_over_ranks(float* x, int64_t count) {
  if (group_.sums_device_memory())  // NCCL: summed where it is, on the GPU
    return timed([&] { return group_.all_sum({reinterpret_cast<uint8_t*>(x), floats(count)}, DType::kF32); });
  host_.resize(static_cast<size_t>(count));
  device_.download(x, floats(count), host_.data());
  TS_RETURN_IF_ERROR(timed([&] { return group_.all_sum(bytes_of(host_), DType::kF32); }));
  device_.upload(host_.data(), floats(count), x);
  return {};
}

Status Forward::run_layer(size_t index, std::span<const SeqSlice> slices, int64_t tokens) {
  // The rank's heads and intermediate size (the whole model's without a group).
  const ModelConfig& c = model_.layer_config();
  const LayerWeights& w = weights_.layers[index];
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const int64_t h = c.hidden_size, hd = c.head_dim, heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  float *x = x_.f32(), *norm = norm_.f32(), *q = q_.f32(), *k = k_.f32(), *v = v_.f32();
  float *attn = attn_.f32(), *proj = proj_.f32(), *gate = gate_.f32(), *up = up_.f32();

  // Attention block. Shapes: norm f32 [tokens, h], q [tokens, heads, hd], k/v [tokens, kv_heads, hd].
  const Device::Projection qkv[] = {{&w.wq, &w.bq, q}, {&w.wk, &w.bk, k}, {&w.wv, &w.bv, v}};
  const RowNorm attn_norm{&w.attn_norm, eps, norm};
  // Positions, the KV cache and attention belong to each sequence (slices).
  const auto layer = static_cast<int64_t>(index);
  const int64_t model_layer = model_.range().begin + layer;
  const ArchSpec& arch = model_.arch();
  const bool local = arch.local_rope(model_layer);
  const bool longrope = c.rope.type == RopeType::kLongRope && !local;
  const AttendArgs attend{.q = q,
                          .k = k,
                          .v = v,
                          .out = attn,
                          .pages = &kv_pool_->pages(),
                          .layer = layer,
                          .parts = slices,
                          .n_heads = heads,
                          .sliding_window = arch.window(model_layer),
                          .scale = arch.query_pre_attn_scalar > 0
                                       ? static_cast<float>(std::pow(arch.query_pre_attn_scalar, -0.5))
                                       : 1.0f / std::sqrt(static_cast<float>(hd)),
                          .rotary = {.inv_freq = local ? local_inv_freq_.f32() : inv_freq_.f32(),
                                     .dim = arch.rotary_dim(hd),
                                     .interleaved = arch.rope == RopeStyle::kInterleaved,
                                     .scaling = rope_scaling(local ? *arch.sliding_rope : c.rope)},
                          .long_inv_freq = longrope ? long_inv_freq_.f32() : nullptr,
                          .long_after = c.rope.original_max_position_embeddings};
  if (arch.qk_norm) {  // q and k normalized between the matmuls and rope
    device_.matmuls(x, tokens, qkv, attn_norm);
    device_.rms_norm(q, tokens * heads, hd, w.q_norm, eps, q);
    device_.rms_norm(k, tokens * kv_heads, hd, w.k_norm, eps, k);
    device_.attend(attend);
  } else {
    device_.project_attend(x, tokens, qkv, attn_norm, attend);
  }
  const bool sandwich = arch.norm == NormPlacement::kSandwich;
  // The block's output (in proj; summed over the ranks, whose o and down
  // projections each hold a part of the input), its post-norm when sandwiched,
  // then onto x. The bias is added once: by rank 0.
  const TensorView kNoBias{};
  // `next`: the norm with which the next matmul reads x (matmul_add's hint).
  const auto add_block = [&](const float* in, const TensorView& w, const TensorView& bias, const TensorView& post,
                             const RowNorm& next) -> Status {
    const TensorView& own_bias = group_.rank() == 0 ? bias : kNoBias;
    if (!sandwich && !tp_) {
      device_.matmul_add(in, tokens, w, own_bias, proj, x, next);
      return {};
    }
    device_.matmul(in, tokens, w, own_bias, proj);
    if (tp_) TS_RETURN_IF_ERROR(sum_over_ranks(proj, tokens * h));
    if (sandwich) device_.rms_norm(proj, tokens, h, post, eps, proj);
    device_.add(proj, tokens * h, x);
    return {};
  };
  // MLP block: gate/up f32 [tokens, intermediate], or the experts (moe.h).
  const RowNorm ffn_norm{&w.ffn_norm, eps, norm};
  const bool experts = arch.has_experts(model_layer);
  TS_RETURN_IF_ERROR(add_block(attn, w.wo, w.bo, w.post_attn_norm, experts ? RowNorm{} : ffn_norm));
  if (experts) {
    if (!sandwich && !tp_) {  // the experts' sum straight onto x, x normalized by MoeMlp (moe.h: bitwise, then added)
      moe_.run(device_, w, arch.moe, x, tokens, h, x, /*add=*/true, ffn_norm);
      return {};
    }
    device_.rms_norm(x, tokens, h, w.ffn_norm, eps, norm);
    moe_.run(device_, w, arch.moe, norm, tokens, h, proj);
    if (tp_) TS_RETURN_IF_ERROR(sum_over_ranks(proj, tokens * h));
    if (sandwich) device_.rms_norm(proj, tokens, h, w.post_ffn_norm, eps, proj);
    device_.add(proj, tokens * h, x);
    return {};
  }
  if (arch.activation == Activation::kGeluTanh) {
    const Device::Projection gate_up[] = {{&w.w_gate, &w.b_gate, gate}, {&w.w_up, &w.b_up, up}};
    device_.matmuls(x, tokens, gate_up, ffn_norm);
    device_.gelu_tanh_mul(gate, up, tokens * c.intermediate_size, gate);
  } else {
    device_.gate_up(x, tokens, w.w_gate, w.b_gate, w.w_up, w.b_up, up, gate, ffn_norm);
  }
  const bool last = index + 1 == weights_.layers.size();
  return add_block(gate, w.w_down, w.b_down, w.post_ffn_norm,
                   last ? RowNorm{} : RowNorm{&weights_.layers[index + 1].attn_norm, eps, norm});
}

}  // namespace tessera
