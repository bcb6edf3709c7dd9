// PrefixCache: full KV blocks kept after their sequence moves on or ends, found
// again by what they hold, so that a prompt starting like an earlier one (a
// system prompt, a chat's earlier turns) skips recomputing that prefix.
//
// A full block of `block_size` tokens is named by a hash chain:
//   digest(block i) = SHA-256(digest(block i-1) | salt | tokens of block i)
// (the all-zero digest before block 0), so a digest names the whole prefix up
// to the block's end, not the block alone, and a per-request salt (the API's
// cache_salt) gives a tenant a chain no other salt can reach: one tenant cannot
// learn by timing whether another sent a prompt. SHA-256 keeps the chain exact:
// a hit is the same tokens at the same positions, so the block holds bitwise
// the keys and values the sequence would have computed (Forward is chunk- and
// batch-invariant).
//
// The cache holds one reference to each block it keeps (a one-block KvCache),
// beside the sequences that use it; a block the cache alone holds is evictable.
// Eviction is least recently used. A lookup or insertion touches the chain from
// its last block to its first, so a prefix is always more recent than its
// continuations and the deepest blocks go first.
//
// Thread safety: none; the inference thread that owns the pool calls it.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/kv_cache.h"

namespace tessera {

class PrefixCache {
 public:
  using Digest = std::array<uint8_t, 32>;

  explicit PrefixCache(KvPool& pool) : pool_(pool) {}
  ~PrefixCache() { clear(); }
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The digest of a full block after the chain `parent` (nullptr: the first block).
  static Digest digest(const Digest* parent, std::string_view salt, std::span<const int32_t> tokens);

  struct Hit {
    std::vector<int32_t> blocks;  // the cached blocks of the prefix, in order
    std::vector<Digest> chain;    // their digests
  };
  // The digests of the first `blocks` full blocks of `tokens` (at most as many as it holds).
  static std::vector<Digest> chain(std::span<const int32_t> tokens, std::string_view salt, int64_t block_size,
                                   int64_t blocks);
  // The longest run of full blocks of `tokens` (at most max_blocks) that is
  // cached under `salt`; marks it used now.
  Hit lookup(std::span<const int32_t> tokens, std::string_view salt, int64_t max_blocks);
  // The longest leading run of `chain` that is cached (digests named by a
  // caller that has the tokens: a pipeline's coordinator); marks it used now.
  Hit find(std::span<const Digest> chain);
  // Keeps `block` (full, holding the prefix that `chain` names; chain.back() is
  // its own digest) unless that digest is cached already, and marks the chain
  // used now.
  void insert(std::span<const Digest> chain, int32_t block);
  // Releases up to `blocks` blocks that only the cache holds, least recently
  // used first; returns how many it released.
  int64_t evict(int64_t blocks);
  size_t size() const { return entries_.size(); }
  // Blocks only the cache holds: free for the taking (the pool counts them as
  // their holders change: KvPool::cached_alone, no scan).
  int64_t evictable() const { return pool_.cached_alone(); }
  // Drops every block (they return to the pool when no sequence holds them).
  void clear();

 private:
  struct DigestHash {
    size_t operator()(const Digest& d) const;
  };
  struct Node {
    Digest digest;
    KvCache block;  // one full block, held
    int32_t id() const { return block.blocks()[0]; }
  };
  // Marks the chain's entries used now, its first block the most recent.
  void touch(std::span<const Digest> chain);
  // Drops an entry: its mark in the pool, then its reference.
  std::list<Node>::iterator drop(std::list<Node>::iterator node);

  KvPool& pool_;
  std::list<Node> lru_;  // front: least recently used
  std::unordered_map<Digest, std::list<Node>::iterator, DigestHash> entries_;
};

}  // namespace tessera
