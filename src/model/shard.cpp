// plan_shard and Model::cut: a tensor-parallel rank's part of a whole model, as
// shard.h lays it out, walking the one list of a layer's tensors (layer_tensors)
// of the whole model and of the rank's part side by side.
#include "model/shard.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/mapped_file.h"

namespace tessera {

namespace {

std::string count(int64_t n, const char* what) { return std::to_string(n) + " " + what; }

// The KV projections: their rows start at the rank's first KV head (which
// several ranks share when KV heads are fewer than ranks).
bool is_kv(TensorView LayerWeights::*slot) {
  return slot == &LayerWeights::wk || slot == &LayerWeights::wv || slot == &LayerWeights::bk ||
         slot == &LayerWeights::bv;
}

// The first row a rank's `rows` of a tensor in `slot` start at: its KV heads' for
// k and v, else its n-th (q's heads, gate and up's intermediate, the experts').
int64_t first_row(TensorView LayerWeights::*slot, const ShardPlan& p, int64_t head_dim, int64_t rows) {
  return slot && is_kv(slot) ? p.first_kv_head * head_dim : p.shard.rank * rows;
}

size_t row_bytes(const TensorView& t) { return dtype_bytes(t.dtype, t.shape.size() == 1 ? 1 : t.dim(1)); }

// Rows [begin, + rows) of `t` (elements, for a 1-D tensor), as a view.
TensorView rows_of(const TensorView& t, int64_t begin, int64_t rows) {
  TS_CHECK(begin >= 0 && begin + rows <= t.dim(0), "rows [", begin, ", +", rows, ") of ", shape_string(t.shape));
  TensorView out = t;
  out.shape[0] = rows;
  out.data = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(begin) * row_bytes(t);
  return out;
}

// The bytes a rank's Model owns (column cuts, fused tensors) beside the whole model's storage.
struct ShardStorage {
  std::shared_ptr<const void> whole;
  std::vector<std::vector<uint8_t>> copies;

  TensorView make(DType dtype, std::vector<int64_t> shape) {
    TensorView view{dtype, std::move(shape), nullptr};
    view.data = copies.emplace_back(view.nbytes()).data();
    return view;
  }
  // Columns [begin, + columns) of a 2-D `t`, copied; whole blocks of a quantized type (Model::cut checks).
  TensorView columns_of(const TensorView& t, int64_t begin, int64_t columns) {
    TS_CHECK(t.shape.size() == 2 && begin >= 0 && begin + columns <= t.dim(1), "columns [", begin, ", +", columns,
             ") of ", shape_string(t.shape));
    const int64_t block = dtype_block_elements(t.dtype);
    TS_CHECK(begin % block == 0 && columns % block == 0, "columns [", begin, ", +", columns, ") cut ",
             dtype_name(t.dtype), "'s blocks");
    TensorView out = make(t.dtype, {t.dim(0), columns});
    const size_t in_row = row_bytes(t), out_row = dtype_bytes(t.dtype, columns);
    const auto* src = static_cast<const uint8_t*>(t.data) + dtype_bytes(t.dtype, begin);
    auto* dst = static_cast<uint8_t*>(const_cast<void*>(out.data));
    for (int64_t r = 0; r < t.dim(0); ++r)
      std::memcpy(dst + static_cast<size_t>(r) * out_row, src + static_cast<size_t>(r) * in_row, out_row);
    return out;
  }
};

}  // namespace

Result<ShardPlan> plan_shard(const ModelConfig& c, const ArchSpec& arch, Shard shard) {
  const int64_t n = shard.ranks;
  if (n < 1 || shard.rank < 0 || shard.rank >= n)
    return Status::invalid_input("[shard] rank " + std::to_string(shard.rank) + " is not in [0, " + std::to_string(n) +
                                 ")");
  const std::string ranks = " by " + count(n, "ranks");
  if (c.num_attention_heads % n != 0)
    return Status::invalid_input("[shard] " + count(c.num_attention_heads, "attention heads") + " are not divisible" +
                                 ranks);
  const int64_t kv = c.num_key_value_heads;
  if (kv >= n ? kv % n != 0 : n % kv != 0)
    return Status::invalid_input("[shard] " + count(kv, "KV heads") +
                                 (kv >= n ? " are not divisible" + ranks : " do not divide " + count(n, "ranks")));
  bool dense = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) dense = dense || !arch.has_experts(l);
  if (dense && c.intermediate_size % n != 0)
    return Status::invalid_input("[shard] intermediate_size " + std::to_string(c.intermediate_size) +
                                 " is not divisible" + ranks);
  if (arch.moe.experts > 0 && arch.moe.intermediate % n != 0)
    return Status::invalid_input("[shard] the experts' intermediate size " + std::to_string(arch.moe.intermediate) +
                                 " is not divisible" + ranks);
  if (arch.moe.shared_intermediate % n != 0)
    return Status::invalid_input("[shard] the shared expert's intermediate size " +
                                 std::to_string(arch.moe.shared_intermediate) + " is not divisible" + ranks);
  if (c.vocab_size < n)
    return Status::invalid_input("[shard] a vocabulary of " + std::to_string(c.vocab_size) + " is smaller than " +
                                 count(n, "ranks"));
  ShardPlan p;
  p.shard = shard;
  p.heads = c.num_attention_heads / n;
  p.first_head = shard.rank * p.heads;
  p.kv_heads = kv >= n ? kv / n : 1;
  p.first_kv_head = kv >= n ? shard.rank * p.kv_heads : shard.rank * kv / n;
  p.intermediate = dense ? c.intermediate_size / n : 0;
  p.expert_intermediate = arch.moe.intermediate / n;
  p.vocab_chunk = (c.vocab_size + n - 1) / n;
  p.vocab_begin = std::min(c.vocab_size, shard.rank * p.vocab_chunk);
  p.vocab_rows = std::min(c.vocab_size, p.vocab_begin + p.vocab_chunk) - p.vocab_begin;
  if (p.vocab_rows <= 0)
    return Status::invalid_input("[shard] a vocabulary of " + std::to_string(c.vocab_size) + " leaves rank " +
                                 std::to_string(shard.rank) + " of " + std::to_string(n) + " no rows");
  return p;
}

ModelConfig shard_layer_config(const ModelConfig& config, const ShardPlan& plan) {
  ModelConfig out = config;
  out.num_attention_heads = plan.heads;
  out.num_key_value_heads = plan.kv_heads;
  if (plan.intermediate > 0) out.intermediate_size = plan.intermediate;
  return out;
}

ArchSpec shard_arch(const ArchSpec& arch, const ShardPlan& plan) {
  ArchSpec out = arch;
  out.moe.intermediate = plan.expert_intermediate;
  out.moe.shared_intermediate /= plan.shard.ranks;
  return out;
}

Result<Model> Model::cut(Shard shard) const {
  TS_CHECK(shard_.ranks == 1, "cutting a model that is already rank ", shard_.rank, " of ", shard_.ranks);
  if (shard.ranks == 1 && shard.rank == 0) return *this;
  TS_ASSIGN_OR_RETURN(const ShardPlan plan, plan_shard(config_, arch_, shard));
  Model out;
  out.config_ = config_;
  out.layer_config_ = shard_layer_config(config_, plan);
  out.arch_ = shard_arch(arch_, plan);
  out.shard_ = shard;
  out.range_ = range_;
  auto storage = std::make_shared<ShardStorage>();
  storage->whole = storage_;
  const ModelWeights& whole = weights_;
  ModelWeights& w = out.weights_;
  w.embed = whole.embed;
  w.final_norm = whole.final_norm;
  if (!whole.lm_head.empty()) w.lm_head = rows_of(whole.lm_head, plan.vocab_begin, plan.vocab_rows);
  const int64_t hd = config_.head_dim;
  for (size_t i = 0; i < whole.layers.size(); ++i) {
    const int64_t layer = range_.begin + static_cast<int64_t>(i);
    const std::vector<LayerTensor> from = layer_tensors(config_, arch_, layer);
    const std::vector<LayerTensor> to = layer_tensors(out.layer_config_, out.arch_, layer);
    TS_CHECK(from.size() == to.size(), "layer ", layer, " has ", from.size(), " tensors whole and ", to.size(),
             " in a shard");
    const LayerWeights& src = whole.layers[i];
    LayerWeights& dst = w.layers.emplace_back();
    for (size_t t = 0; t < to.size(); ++t) {
      const TensorView& whole_tensor = from[t].in(src);
      TensorView& part = to[t].in(dst);
      if (!to[t].parts.empty()) {  // fused: each part's rows, concatenated in the same order
        part = storage->make(whole_tensor.dtype, to[t].shape);
        auto* out_bytes = static_cast<uint8_t*>(const_cast<void*>(part.data));
        for (const auto& [slot, rows] : to[t].parts) {
          const TensorView piece = rows_of(src.*slot, first_row(slot, plan, hd, rows), rows);
          std::memcpy(out_bytes, piece.data, piece.nbytes());
          release_mapped_pages(piece.data, piece.nbytes());  // copied: the file's pages need not stay
          out_bytes += piece.nbytes();
        }
        to[t].split(dst);
        continue;
      }
      // The cut follows the shapes: a dimension the rank's config makes smaller
      // is cut (rows: outputs; columns: inputs, whose partial sums all_sum adds).
      const std::vector<int64_t>& shape = to[t].shape;
      if (shape == whole_tensor.shape) {
        part = whole_tensor;  // norms, the router, the o and down biases (added by rank 0)
      } else if (shape[0] != whole_tensor.dim(0)) {
        part = rows_of(whole_tensor, first_row(to[t].slot, plan, hd, shape[0]), shape[0]);
      } else {
        // A column cut of GGUF blocks (o, down) must leave each rank whole blocks of k.
        if (const int64_t block = dtype_block_elements(whole_tensor.dtype); shape[1] % block != 0)
          return Status::invalid_input(
              "[shard] layer " + std::to_string(layer) + "'s " + to[t].name + " is " +
              std::string(dtype_name(whole_tensor.dtype)) + " with k = " + std::to_string(whole_tensor.dim(1)) + ": " +
              std::to_string(shard.ranks) + " ranks would cut it into " + std::to_string(shape[1]) +
              " columns each, not whole blocks of " + std::to_string(block) +
              " (run it on a rank count that divides k into whole blocks)");
        part = storage->columns_of(whole_tensor, plan.shard.rank * shape[1], shape[1]);
        release_mapped_pages(whole_tensor.data, whole_tensor.nbytes());  // read through for the copy
      }
      TS_CHECK(part.shape == to[t].shape, "layer ", layer, "'s ", to[t].name, " cut to ", shape_string(part.shape),
               ", expected ", shape_string(to[t].shape));
    }
  }
  out.storage_ = std::move(storage);
  return out;
}

}  // namespace tessera

namespace tessera {

std::vector<ShardTensor> shard_tensors(const ModelConfig& c, const ArchSpec& arch, LayerRange range,
                                       const ShardPlan& plan) {
  const TensorNames names{"model."};
  std::vector<ShardTensor> out;
  if (range.begin == 0)
    out.push_back({names.global("embed_tokens.weight"), {c.vocab_size, c.hidden_size}, &ModelWeights::embed});
  const ModelConfig layer_config = shard_layer_config(c, plan);
  const ArchSpec layer_arch = shard_arch(arch, plan);
  for (int64_t layer = range.begin; layer < range.end; ++layer)
    for (LayerTensor& t : layer_tensors(layer_config, layer_arch, layer))
      out.push_back({names.layer(layer, t.name), t.shape, nullptr, layer, std::move(t)});
  if (range.end == c.num_hidden_layers) {
    out.push_back({names.global("norm.weight"), {c.hidden_size}, &ModelWeights::final_norm});
    out.push_back({names.lm_head, {plan.vocab_rows, c.hidden_size}, &ModelWeights::lm_head});
  }
  return out;
}

Result<Model> Model::assemble(const ModelConfig& config, LayerRange range, Shard shard,
                              std::span<const TensorView> tensors, std::shared_ptr<const void> storage) {
  Model out;
  out.config_ = config;
  TS_ASSIGN_OR_RETURN(const ArchSpec arch, arch_for(config));
  if (arch.tie_word_embeddings) out.config_.tie_word_embeddings = *arch.tie_word_embeddings;
  if (range.begin < 0 || range.begin >= range.end || range.end > config.num_hidden_layers)
    return Status::invalid_input("[shard] layer range [" + std::to_string(range.begin) + ", " +
                                 std::to_string(range.end) + ") is not inside [0, " +
                                 std::to_string(config.num_hidden_layers) + ")");
  TS_ASSIGN_OR_RETURN(const ShardPlan plan, plan_shard(out.config_, arch, shard));
  out.layer_config_ = shard_layer_config(out.config_, plan);
  out.arch_ = shard_arch(arch, plan);
  out.shard_ = shard;
  out.range_ = range;
  const std::vector<ShardTensor> expected = shard_tensors(out.config_, arch, range, plan);
  if (tensors.size() != expected.size())
    return Status::invalid_input("[shard] " + std::to_string(tensors.size()) + " tensors for a shard of " +
                                 std::to_string(expected.size()));
  ModelWeights& w = out.weights_;
  w.layers.resize(static_cast<size_t>(range.end - range.begin));
  for (size_t i = 0; i < expected.size(); ++i) {
    const ShardTensor& t = expected[i];
    if (tensors[i].shape != t.shape)
      return Status::invalid_input("[shard] " + t.name + " has shape " + shape_string(tensors[i].shape) +
                                   ", expected " + shape_string(t.shape));
    if (t.global) {
      w.*t.global = tensors[i];
      continue;
    }
    LayerWeights& layer = w.layers[static_cast<size_t>(t.layer - range.begin)];
    t.tensor.in(layer) = tensors[i];
    t.tensor.split(layer);
  }
  out.storage_ = std::move(storage);
  return out;
}

}  // namespace tessera
