// The control messages of the prefix cache over a pipeline (control_frame.h;
// docs/wire-protocol.md section 6, minor 2). The coordinator names every full KV
// block of a request by its hash chain digest (engine/prefix_cache.h: the tokens
// up to the block's end and the request's cache_salt), since a stage after the
// first sees hidden states, not tokens:
//
//   C -> each S  prefix {"blocks": [hex digest, ...]}   (request id): the chain of
//                the new request's leading prompt blocks that it could reuse; the
//                stage opens the request and takes the longest run of them it holds
//   S -> C       prefix {"blocks": n}                   (request id): the run it took,
//                n <= the number asked; the coordinator reuses the fewest any stage took
//   C -> S0 -> ... -> Sn-1  blocks {"reuse": n, "names": [hex digest, ...]}
//                (request id), passed along ahead of the request's next hidden
//                states: keep the first `reuse` blocks taken (only on the request's
//                first `blocks`), then name the request's next full blocks, which
//                each stage keeps in its prefix cache once it has written them
//   S -> C       heartbeat {"kv_blocks": total, "kv_used": used}: the stage's KV
//                pool, used = held by requests (cached blocks nobody holds are free)
//
// A digest is 64 lowercase hex characters (32 bytes). Each list is bounded by
// the receiver (a stage: its context / block size, the most full blocks a
// request holds); refusals are kInvalidInput naming the message and the field.
//
// Pure functions; safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"

namespace tessera::wire {

using BlockDigest = std::array<uint8_t, 32>;

nlohmann::json prefix_query(std::span<const BlockDigest> chain);
nlohmann::json prefix_reply(int64_t blocks);
nlohmann::json blocks_message(std::optional<int64_t> reuse, std::span<const BlockDigest> names);

// The digests of `name` ("blocks" of a query, "names" of a blocks message): an
// array of at most max_blocks digests, each 64 lowercase hex characters.
Result<std::vector<BlockDigest>> digests_from_json(const nlohmann::json& message, const char* name, size_t max_blocks);
// A reply's "blocks": an integer in [0, asked].
Result<int64_t> prefix_blocks_from_json(const nlohmann::json& reply, int64_t asked);

// A heartbeat's KV pool, when it carries one (older stages do not): kv_used <= kv_blocks.
struct KvUsage {
  uint64_t blocks = 0;
  uint64_t used = 0;
};
nlohmann::json heartbeat_message(std::optional<KvUsage> usage);
Result<std::optional<KvUsage>> kv_usage_from_heartbeat(const nlohmann::json& heartbeat);

}  // namespace tessera::wire
