// CpuDevice::attention: paged attention of one sequence's tokens over its KV blocks, cut
// into units of work (a tile of tokens x query heads of one KV head) that the threads
// share. Every score and output is summed as a lone token's are, whatever the units, so a
// token's outputs depend neither on what else is in the call nor on the thread count.
#pragma once

#include "backend/device.h"
#include "core/thread_pool.h"

namespace tessera::cpu {

// a's attention on the pool's threads; `amx`: by cpu::amx::attend (a bf16 cache whose keys
// and values kv_store wrote in the tiles' layouts), else by vector dot products and
// multiply-adds (dot_rows, softmax_scaled, axpy_rows).
void paged_attention(ThreadPool& pool, const AttentionArgs& a, bool amx);

}  // namespace tessera::cpu
