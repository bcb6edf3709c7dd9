#include "engine/prefix_cache.h"

#include <openssl/evp.h>

#include <cstring>
#include <memory>

#include "core/check.h"

namespace tessera {

PrefixCache::Digest PrefixCache::digest(const Digest* parent, std::string_view salt, std::span<const int32_t> tokens) {
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  TS_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "SHA-256 init");
  const Digest root{};
  const Digest& before = parent ? *parent : root;
  // The salt's length first, so that salt and tokens cannot trade bytes.
  const uint64_t salt_size = salt.size();
  bool ok = EVP_DigestUpdate(ctx.get(), before.data(), before.size()) == 1 &&
            EVP_DigestUpdate(ctx.get(), &salt_size, sizeof salt_size) == 1 &&
            EVP_DigestUpdate(ctx.get(), salt.data(), salt.size()) == 1 &&
            EVP_DigestUpdate(ctx.get(), tokens.data(), tokens.size_bytes()) == 1;
  Digest out{};
  unsigned int size = 0;
  ok = ok && EVP_DigestFinal_ex(ctx.get(), out.data(), &size) == 1 && size == out.size();
  TS_CHECK(ok, "SHA-256 of a KV block");
  return out;
}

size_t PrefixCache::DigestHash::operator()(const Digest& d) const {
  size_t h;
  std::memcpy(&h, d.data(), sizeof h);  // SHA-256 bytes are already uniform
  return h;
}

std::vector<PrefixCache::Digest> PrefixCache::chain(std::span<const int32_t> tokens, std::string_view salt,
                                                    int64_t block_size, int64_t blocks) {
  std::vector<Digest> out;
  const auto bs = static_cast<size_t>(block_size);
  for (size_t i = 0; static_cast<int64_t>(i) < blocks && (i + 1) * bs <= tokens.size(); ++i)
    out.push_back(digest(out.empty() ? nullptr : &out.back(), salt, tokens.subspan(i * bs, bs)));
  return out;
}

PrefixCache::Hit PrefixCache::lookup(std::span<const int32_t> tokens, std::string_view salt, int64_t max_blocks) {
  return find(chain(tokens, salt, pool_.block_size(), max_blocks));
}

PrefixCache::Hit PrefixCache::find(std::span<const Digest> chain) {
  Hit hit;
  for (const Digest& d : chain) {
    const auto it = entries_.find(d);
    if (it == entries_.end()) break;
    hit.blocks.push_back(it->second->id());
    hit.chain.push_back(d);
  }
  touch(hit.chain);
  return hit;
}

void PrefixCache::insert(std::span<const Digest> chain, int32_t block) {
  TS_CHECK(!chain.empty(), "a KV block inserted without its digest");
  if (!entries_.contains(chain.back())) {
    KvCache held(pool_, pool_.block_size());
    held.share_prefix(std::span(&block, 1));
    pool_.set_cached(block, true);
    lru_.push_back(Node{chain.back(), std::move(held)});
    entries_.emplace(chain.back(), std::prev(lru_.end()));
  }
  touch(chain);
}

void PrefixCache::touch(std::span<const Digest> chain) {
  for (auto d = chain.rbegin(); d != chain.rend(); ++d) {
    const auto it = entries_.find(*d);
    if (it != entries_.end()) lru_.splice(lru_.end(), lru_, it->second);
  }
}

int64_t PrefixCache::evict(int64_t blocks) {
  int64_t released = 0;
  for (auto node = lru_.begin(); node != lru_.end() && released < blocks;) {
    if (pool_.holders(node->id()) > 1) {  // a sequence still uses it
      ++node;
      continue;
    }
    node = drop(node);
    ++released;
  }
  return released;
}

std::list<PrefixCache::Node>::iterator PrefixCache::drop(std::list<Node>::iterator node) {
  pool_.set_cached(node->id(), false);
  entries_.erase(node->digest);
  return lru_.erase(node);  // its KvCache gives the block back
}

void PrefixCache::clear() {
  for (auto node = lru_.begin(); node != lru_.end();) node = drop(node);
}

}  // namespace tessera
