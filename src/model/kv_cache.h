// The paged KV cache. A KvPool is one device buffer of fixed-size blocks
// (KvPages: `block_size` positions of every layer of one layer range), sized by
// a memory budget. A KvCache is one sequence's block table in a pool: it takes
// blocks as the sequence grows and gives them back when it shrinks or is
// destroyed, so a sequence that ends, is cancelled or fails frees its blocks at
// once (RAII).
//
// Blocks are reference-counted: fork() makes a sequence that shares another's
// blocks (a common prompt prefix; the prefix cache builds on this), and a shared
// block is copied before it is written (copy-on-write), so a sequence never
// sees another's keys. An empty pool refuses with kOverloaded naming the budget;
// nothing is taken from anyone else.
//
// Thread safety: a pool and its caches belong to the one inference thread that
// runs them. A pool must outlive its caches (checked when it is destroyed).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/device.h"
#include "core/status.h"

namespace tessera {

struct KvPoolOptions {
  uint64_t budget_bytes = 0;  // 0: kv_memory_default(device)
  DType dtype = DType::kF32;  // f32, bf16 or f16
  int64_t block_size = 32;    // positions per block
};

// The default budget when none is given: a quarter of what the device can still
// allocate (the host's MemAvailable for the CPU, whose pool pages cost nothing
// until a sequence writes them; a GPU's free memory once the weights are placed).
uint64_t kv_memory_default(const Device& device);

class KvPool {
 public:
  // The shape of what one position holds: `layers` layers of n_kv_heads x head_dim.
  struct Geometry {
    int64_t layers = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
  };
  // Allocates the pool's memory on `device` (at least one block); kOverloaded
  // when the device cannot hold it.
  static Result<std::unique_ptr<KvPool>> create(Device& device, Geometry geometry, KvPoolOptions options);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  const KvPages& pages() const { return pages_; }
  int64_t block_size() const { return pages_.block_size; }
  int64_t total_blocks() const { return pages_.blocks; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  uint64_t budget_bytes() const { return budget_bytes_; }
  // Its dtype and capacity, for the setup a command prints: "bf16, 16384 positions in 64.0 MiB".
  std::string describe() const;
  // How many holders a block has (0: free).
  int32_t holders(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
  // kOverloaded: needed blocks are more than the free ones.
  Status check_free(int64_t needed) const;
  // The prefix cache's mark on a block it holds (engine/prefix_cache.h): the pool
  // counts the marked blocks that have no other holder as holders come and go, so
  // that what the cache alone holds (free for the taking) is known without a scan.
  void set_cached(int32_t block, bool cached);
  int64_t cached_alone() const { return cached_alone_; }

 private:
  friend class KvCache;
  KvPool(Device& device, Buffer memory, KvPages pages, uint64_t budget_bytes);
  int32_t take();  // a free block, with one holder; precondition: one is free
  void hold(int32_t block) {
    if (++refs_[static_cast<size_t>(block)] == 2 && cached_[static_cast<size_t>(block)]) --cached_alone_;
  }
  void release(int32_t block);

  Device& device_;
  Buffer memory_;
  KvPages pages_;
  uint64_t budget_bytes_;
  std::vector<int32_t> refs_;    // holders per block
  std::vector<int32_t> free_;    // free blocks, the last freed taken first
  std::vector<uint8_t> cached_;  // set_cached's marks, per block
  int64_t cached_alone_ = 0;     // marked blocks with one holder
};

class KvCache {
 public:
  // An empty sequence of at most `capacity` positions in `pool`.
  KvCache(KvPool& pool, int64_t capacity);
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  ~KvCache();

  int64_t capacity() const { return capacity_; }
  // Number of positions written so far; Forward advances it.
  int64_t length() const { return length_; }
  // Keeps the first n <= length() positions and gives back the blocks past them.
  void truncate(int64_t n);
  // A new sequence holding the first n <= length() positions of this one, sharing their blocks.
  KvCache fork(int64_t n) const;
  // Starts an empty sequence with these full blocks of the pool (a cached
  // prefix, engine/prefix_cache.h), shared with their other holders: length()
  // becomes their positions. Writes only ever go past length(), so the shared
  // blocks are never written.
  void share_prefix(std::span<const int32_t> full_blocks);

  std::span<const int32_t> blocks() const { return blocks_; }
  KvPool& pool() const { return *pool_; }
  uint64_t bytes() const { return blocks_.size() * pool_->pages().block_bytes(); }

  // For Forward. Blocks `tokens` more positions need: new ones, plus a copy of a
  // shared partly filled last block.
  int64_t blocks_needed(int64_t tokens) const;
  // Makes positions [length(), + tokens) writable; precondition: the pool has
  // blocks_needed(tokens) free (KvPool::check_free), so it cannot fail.
  void prepare(int64_t tokens);
  void advance(int64_t tokens) { length_ += tokens; }

 private:
  void release_all();

  KvPool* pool_;
  int64_t capacity_;
  int64_t length_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace tessera
