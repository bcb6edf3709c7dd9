#include "model/kv_cache.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "core/check.h"

namespace tessera {

uint64_t kv_memory_default(const Device& device) { return device.available_memory() / 4; }

Result<std::unique_ptr<KvPool>> KvPool::create(Device& device, Geometry geometry, KvPoolOptions options) {
  TS_CHECK(geometry.layers > 0 && geometry.n_kv_heads > 0 && geometry.head_dim > 0, "KV geometry ", geometry.layers,
           " x ", geometry.n_kv_heads, " x ", geometry.head_dim);
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16 && options.dtype != DType::kF16)
    return Status::invalid_input("KV cache dtype " + std::string(dtype_name(options.dtype)) +
                                 " is not f32, bf16 or f16");
  if (options.block_size < 1) return Status::invalid_input("KV block size must be at least 1");
  KvPages pages{.dtype = options.dtype,
                .block_size = options.block_size,
                .layers = geometry.layers,
                .n_kv_heads = geometry.n_kv_heads,
                .head_dim = geometry.head_dim};
  const uint64_t budget = options.budget_bytes ? options.budget_bytes : kv_memory_default(device);
  pages.blocks = static_cast<int64_t>(std::min<uint64_t>(budget / pages.block_bytes(), INT32_MAX));
  if (pages.blocks < 1)
    return Status::invalid_input("the KV memory budget of " + std::to_string(budget) +
                                 " bytes is less than one block of " + std::to_string(pages.block_bytes()) + " bytes");
  auto memory = device.alloc(static_cast<size_t>(pages.blocks) * pages.block_bytes());
  if (!memory.ok()) return memory.status().with_context("KV pool of " + std::to_string(budget) + " bytes");
  pages.base = memory->data();
  return std::unique_ptr<KvPool>(new KvPool(device, std::move(memory).value(), pages, budget));
}

KvPool::KvPool(Device& device, Buffer memory, KvPages pages, uint64_t budget_bytes)
    : device_(device), memory_(std::move(memory)), pages_(pages), budget_bytes_(budget_bytes) {
  refs_.assign(static_cast<size_t>(pages_.blocks), 0);
  cached_.assign(static_cast<size_t>(pages_.blocks), 0);
  free_.reserve(static_cast<size_t>(pages_.blocks));
  for (int64_t b = pages_.blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

KvPool::~KvPool() {
  TS_CHECK(free_blocks() == total_blocks(), total_blocks() - free_blocks(),
           " KV blocks are still held by sequences when their pool is destroyed");
}

std::string KvPool::describe() const {
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", static_cast<double>(pages_.blocks) * pages_.block_bytes() / (1 << 20));
  return std::string(dtype_name(pages_.dtype)) + ", " + std::to_string(pages_.blocks * pages_.block_size) +
         " positions in " + mib + " MiB";
}

Status KvPool::check_free(int64_t needed) const {
  if (needed <= free_blocks()) return {};
  return Status::overloaded("the KV cache is full: " + std::to_string(needed) + " blocks needed, " +
                            std::to_string(free_blocks()) + " of " + std::to_string(total_blocks()) + " free (" +
                            std::to_string(budget_bytes_ >> 20) + " MiB budget, --kv-memory)");
}

int32_t KvPool::take() {
  TS_CHECK(!free_.empty(), "no free KV block");
  const int32_t block = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(block)] = 1;
  return block;
}

void KvPool::release(int32_t block) {
  int32_t& refs = refs_[static_cast<size_t>(block)];
  TS_CHECK(refs > 0, "KV block ", block, " released while free");
  const bool cached = cached_[static_cast<size_t>(block)] != 0;
  TS_CHECK(refs > 1 || !cached, "KV block ", block, " freed while the prefix cache marks it");
  if (--refs == 0) free_.push_back(block);
  if (refs == 1 && cached) ++cached_alone_;
}

void KvPool::set_cached(int32_t block, bool cached) {
  uint8_t& mark = cached_[static_cast<size_t>(block)];
  TS_CHECK(holders(block) > 0, "marking free KV block ", block);
  if (mark == static_cast<uint8_t>(cached)) return;
  mark = static_cast<uint8_t>(cached);
  if (holders(block) == 1) cached_alone_ += cached ? 1 : -1;
}

KvCache::KvCache(KvPool& pool, int64_t capacity) : pool_(&pool), capacity_(capacity) {}

KvCache::KvCache(KvCache&& other) noexcept
    : pool_(other.pool_),
      capacity_(other.capacity_),
      length_(std::exchange(other.length_, 0)),
      blocks_(std::exchange(other.blocks_, {})) {}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
  if (this != &other) {
    release_all();
    pool_ = other.pool_;
    capacity_ = other.capacity_;
    length_ = std::exchange(other.length_, 0);
    blocks_ = std::exchange(other.blocks_, {});
  }
  return *this;
}

KvCache::~KvCache() { release_all(); }

void KvCache::release_all() {
  for (const int32_t block : blocks_) pool_->release(block);
  blocks_.clear();
  length_ = 0;
}

void KvCache::truncate(int64_t n) {
  TS_CHECK(n >= 0 && n <= length_, "truncate to ", n, " of ", length_);
  const auto keep = static_cast<size_t>((n + pool_->block_size() - 1) / pool_->block_size());
  while (blocks_.size() > keep) {
    pool_->release(blocks_.back());
    blocks_.pop_back();
  }
  length_ = n;
}

KvCache KvCache::fork(int64_t n) const {
  TS_CHECK(n >= 0 && n <= length_, "fork of ", n, " of ", length_);
  KvCache copy(*pool_, capacity_);
  const auto shared = static_cast<size_t>((n + pool_->block_size() - 1) / pool_->block_size());
  copy.blocks_.assign(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(shared));
  for (const int32_t block : copy.blocks_) pool_->hold(block);
  copy.length_ = n;
  return copy;
}

void KvCache::share_prefix(std::span<const int32_t> full_blocks) {
  TS_CHECK(length_ == 0 && blocks_.empty(), "sharing a prefix into a sequence of ", length_, " positions");
  const int64_t positions = static_cast<int64_t>(full_blocks.size()) * pool_->block_size();
  TS_CHECK(positions <= capacity_, "a prefix of ", positions, " positions in a sequence of capacity ", capacity_);
  for (const int32_t block : full_blocks) {
    TS_CHECK(pool_->holders(block) > 0, "sharing free KV block ", block);
    pool_->hold(block);
  }
  blocks_.assign(full_blocks.begin(), full_blocks.end());
  length_ = positions;
}

int64_t KvCache::blocks_needed(int64_t tokens) const {
  const int64_t bs = pool_->block_size();
  const int64_t have = static_cast<int64_t>(blocks_.size());
  const int64_t want = (length_ + tokens + bs - 1) / bs;
  const bool copy_last = length_ % bs != 0 && pool_->holders(blocks_.back()) > 1;
  return std::max<int64_t>(0, want - have) + (copy_last ? 1 : 0);
}

void KvCache::prepare(int64_t tokens) {
  const int64_t bs = pool_->block_size();
  if (length_ % bs != 0 && pool_->holders(blocks_.back()) > 1) {  // copy-on-write of the shared partly filled block
    const int32_t shared = blocks_.back();
    const int32_t own = pool_->take();
    const KvPages& pages = pool_->pages();
    auto* base = static_cast<uint8_t*>(pages.base);
    const size_t bytes = pages.block_bytes();
    pool_->device_.copy(base + static_cast<size_t>(shared) * bytes, bytes, base + static_cast<size_t>(own) * bytes);
    pool_->release(shared);
    blocks_.back() = own;
  }
  const auto want = static_cast<size_t>((length_ + tokens + bs - 1) / bs);
  while (blocks_.size() < want) blocks_.push_back(pool_->take());
}

}  // namespace tessera
