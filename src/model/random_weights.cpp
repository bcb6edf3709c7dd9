// Model::random: seeded random weights in a real shape, so speed work on 1B and
// 8B shapes needs no download. Values are uniform with standard deviation 0.02
// (the usual initializer range); norm weights act as 1. Each tensor is filled in
// fixed-size chunks, each from its own generator seeded by (seed, tensor, chunk),
// so the weights do not depend on the thread count. A layer has the tensors its
// family's ArchSpec lists (layer_tensors), filled in that order. The tensors lie one
// after another in anonymous mappings advised for huge pages before they are written
// (Arena), as a checkpoint's mapped files are, so that decode reads both alike.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace tessera {

namespace {

// Memory for tensors, handed out in order (64-byte aligned) from regions of at least
// kRegion bytes, each its own mapping advised for huge pages before any of it is touched
// (map_advised): with one mapping a tensor, a 3 MiB expert would hold at most one 2 MiB
// page. A region's untouched tail costs no memory.
class Arena {
 public:
  // `bytes` of zeros, or nullptr when the memory cannot be mapped (status() says so).
  uint8_t* take(size_t bytes) {
    constexpr size_t kRegion = size_t{64} << 20, kHuge = size_t{2} << 20;
    bytes = (bytes + 63) / 64 * 64;
    if (regions_.empty() || used_ + bytes > size_) {
      size_ = (std::max(bytes, kRegion) + kHuge - 1) / kHuge * kHuge;
      auto region = map_advised(size_);
      if (!region) {
        status_ = Status::overloaded("[random weights] cannot map " + std::to_string(size_) +
                                     " bytes: " + std::strerror(errno));
        return nullptr;
      }
      regions_.push_back(std::move(region));
      used_ = 0;
    }
    uint8_t* out = regions_.back().get() + used_;
    used_ += bytes;
    return out;
  }
  const Status& status() const { return status_; }

 private:
  std::vector<std::shared_ptr<uint8_t>> regions_;
  size_t size_ = 0;  // the last region's
  size_t used_ = 0;  // of it
  Status status_;
};

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class RandomFiller {
 public:
  RandomFiller(DType dtype, uint64_t seed) : dtype_(dtype), seed_(seed) {}

  // A tensor of `shape`, uniform in [-a, a] with a = 0.02 * sqrt(3); or all `constant` when set.
  // Its data is nullptr when the memory cannot be had (status() says so).
  TensorView make(std::vector<int64_t> shape, std::optional<float> constant = std::nullopt) {
    TensorView view{dtype_, std::move(shape), nullptr};
    view.data = arena_->take(view.nbytes());
    if (view.data == nullptr) return view;
    const int64_t n = view.numel();
    const uint64_t tensor_seed = seed_ ^ (0x51ed2701f3a5c7b9ull * ++tensors_);
    constexpr int64_t kChunk = 1 << 16;
    pool_.parallel_for(static_cast<size_t>((n + kChunk - 1) / kChunk), 1, [&](size_t begin, size_t end) {
      for (size_t chunk = begin; chunk < end; ++chunk) {
        uint64_t state = tensor_seed + chunk * 0x2545f4914f6cdd1dull;
        const int64_t i0 = static_cast<int64_t>(chunk) * kChunk;
        for (int64_t i = i0; i < std::min(n, i0 + kChunk); ++i) {
          float value = constant.value_or(0.0f);
          if (!constant) {
            const double unit = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
            value = static_cast<float>((2.0 * unit - 1.0) * 0.02 * std::sqrt(3.0));
          }
          store(view.data, i, value);
        }
      }
    });
    return view;
  }

  const Status& status() const { return arena_->status(); }
  std::shared_ptr<const void> take_storage() { return std::move(arena_); }

 private:
  void store(const void* data, int64_t i, float value) const {
    auto* bytes = static_cast<uint8_t*>(const_cast<void*>(data));
    switch (dtype_) {
      case DType::kF32: reinterpret_cast<float*>(bytes)[i] = value; break;
      case DType::kBF16: reinterpret_cast<uint16_t*>(bytes)[i] = f32_to_bf16(value); break;
      default: reinterpret_cast<uint16_t*>(bytes)[i] = f32_to_f16(value); break;
    }
  }

  DType dtype_;
  uint64_t seed_;
  uint64_t tensors_ = 0;
  ThreadPool pool_;
  std::shared_ptr<Arena> arena_ = std::make_shared<Arena>();
};

}  // namespace

Result<Model> Model::random(const ModelConfig& config, DType dtype, uint64_t seed, Shard shard) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)
    return Status::invalid_input("random weights need dtype f32, bf16 or f16");
  Model model;
  model.config_ = config;
  TS_ASSIGN_OR_RETURN(model.arch_, arch_for(config));
  if (model.arch_.tie_word_embeddings) model.config_.tie_word_embeddings = *model.arch_.tie_word_embeddings;
  model.range_ = {0, config.num_hidden_layers};
  const ModelConfig& c = config;
  const int64_t h = c.hidden_size;
  RandomFiller fill(dtype, seed);
  ModelWeights& w = model.weights_;
  w.embed = fill.make({c.vocab_size, h});
  const float norm_one = 1.0f - model.arch_.norm_offset;  // a norm weight that acts as 1
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w.layers.emplace_back();
    for (const LayerTensor& t : layer_tensors(c, model.arch_, i)) {
      t.in(l) = fill.make(t.shape, t.norm ? std::optional(norm_one) : std::nullopt);
      t.split(l);
    }
  }
  w.final_norm = fill.make({h}, norm_one);
  w.lm_head = model.config_.tie_word_embeddings ? w.embed : fill.make({c.vocab_size, h});
  TS_RETURN_IF_ERROR(fill.status());
  model.storage_ = fill.take_storage();
  model.layer_config_ = model.config_;
  if (shard.ranks == 1 && shard.rank == 0) return model;
  return model.cut(shard);
}

}  // namespace tessera
