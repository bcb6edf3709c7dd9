#include "serve/loop_backend.h"

#include "serve/inference_loop.h"

namespace tessera::serve {

int64_t LocalBackend::max_positions() const {
  const KvPool& pool = engine_.forward->kv_pool();
  return pool.total_blocks() * pool.block_size();
}

// Blocks only the prefix cache holds count as free (evicted when needed); a prompt
// that finds its prefix cached needs fewer, so admission errs on the side of waiting.
int64_t LocalBackend::free_blocks() const {
  return engine_.forward->kv_pool().free_blocks() + engine_.scheduler->prefix_evictable_blocks();
}

// The prompt's blocks, and the one its first token goes in.
int64_t LocalBackend::blocks_for(int64_t tokens) const { return tokens / engine_.forward->kv_pool().block_size() + 1; }

Status LocalBackend::open(uint64_t id, int64_t capacity, const Submission& request) {
  Scheduler& scheduler = *engine_.scheduler;
  Status status = scheduler.open(id, capacity);
  if (status.ok()) status = scheduler.start(id, request.sampling, request.prompt, request.logprobs);
  if (status.ok()) status = scheduler.feed_prompt(id, request.prompt, request.cache_salt).status();
  if (!status.ok()) scheduler.cancel(id);
  return status;
}

void LocalBackend::update_stats(LoopStats& stats) const {
  const KvPool& pool = engine_.forward->kv_pool();
  const Scheduler& scheduler = *engine_.scheduler;
  stats.kv_blocks_total = pool.total_blocks();
  // Blocks only the prefix cache holds are free for the taking, as vLLM counts them.
  stats.kv_blocks_free = pool.free_blocks() + scheduler.prefix_evictable_blocks();
  stats.prefix_cache_queries = scheduler.prefix_queries();
  stats.prefix_cache_hits = scheduler.prefix_hits();
  stats.largest_step = scheduler.largest_step();
  stats.preemptions = scheduler.preemptions();
}

}  // namespace tessera::serve
