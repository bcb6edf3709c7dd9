// Shipping tensor-parallel ranks their shards (wire/tp_weights.h has the
// messages): when a group forms, its leader (rank 0: generate, chat or serve
// with --tp, or a pipeline stage with --tp) offers its weights, and a rank
// started without a checkpoint (tessera rank without --model) asks for them
// and receives its own part of every tensor over the group, through the
// --ship-weights codecs (LZ4, int8/int4 for matrices). The rank derives every
// tensor's shape from the config, the leader's layers and its own rank
// (model/shard.h), bounds the whole shard by its own memory bound before it
// takes anything, and checks each tensor's chunks against that shape: the
// leader's sizes are never trusted. A rank keeps a shard it received for the
// next leader that offers the same weights (digest, layers and rank count).
//
// Thread safety: functions of the group's one caller thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collective/group.h"
#include "core/status.h"
#include "model/model.h"
#include "pipeline/weight_shipping.h"

namespace tessera::pipeline {

// Leader side, right after the group formed and before the Forwards are made:
// offers `whole` (the leader's layers, not cut) and, with `ship`, sends each
// rank that asks its shard. Fails naming the rank (its name in `members`) when
// a rank holds no weights and `ship` is unset, or when a rank refuses its
// shard; a group error fails it as any collective does.
Status offer_shards(Group& group, const Model& whole, const std::optional<ShipEncoding>& ship,
                    const std::vector<std::string>& members);

// What a rank runs: its own checkpoint's shard, or one it received.
struct HeldShard {
  std::unique_ptr<Model> model;
  bool own = false;  // its own checkpoint (--model): it never asks for another
  // weights_digest of the whole layers `model` is a shard of: its own
  // checkpoint's (an offer of another digest for the same layers is refused),
  // or that of the offer it was received from.
  std::string digest;
};

// Rank side, right after the group formed: answers the leader's offer and,
// when `held` is not the offered weights, receives its shard into `held` (all
// of it at most max_bytes, refused before anything is received). `log` gets
// one line when a shard starts and one when it is in. Every rank fails, the
// leader too, naming both digests, when a rank's own checkpoint is another
// than the leader's for the same layers.
Status take_shard(Group& group, HeldShard& held, uint64_t max_bytes,
                  const std::function<void(const std::string&)>& log);

}  // namespace tessera::pipeline
