// Tensor parallelism in the Megatron manner: what rank r of n holds of every
// layer, and the cuts that make a rank's Model from the whole one.
//
//   q, k, v (and biases)     rows: the rank's heads, whole heads. KV heads are
//                            split when there are at least as many as ranks, else
//                            replicated: rank r holds KV head r * kv / n, the one
//                            its query heads read.
//   o_proj                   columns: the rank's heads; its output is a partial
//                            sum, and Forward adds the ranks' with one all_sum.
//   gate, up (and biases)    rows: the rank's n-th of the intermediate size.
//   down_proj                columns: the same n-th; one all_sum after it.
//   MoE experts              each expert's intermediate split as the dense MLP's
//                            (every rank holds a slice of every expert, so routing
//                            and load stay the same on all ranks); the router is
//                            whole, and one all_sum follows the experts' sum.
//   o and down biases        whole; Forward adds them on rank 0 only.
//   norms, q/k norms         whole.
//   embedding                whole (replicated): the lookup needs no collective,
//                            and on the CPU a rank pages in only the rows its
//                            tokens use.
//   LM head                  rows: the rank's ceil(vocab / n) rows of the
//                            vocabulary (the last rank's may be fewer); Forward
//                            gathers the logits with one all_gather.
//   fused qkv / gate_up      each part cut as above, the rank's parts copied
//                            into one tensor of the same layout.
//
// Row cuts are views of the whole tensor (of the mapped file); column cuts and
// fused tensors are copied, once, when the rank's Model is made.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/model_config.h"
#include "model/arch/arch.h"
#include "model/model.h"

namespace tessera {

// What one rank holds, in counts of the whole model's config.
struct ShardPlan {
  Shard shard;
  int64_t heads = 0;  // query heads, from first_head
  int64_t first_head = 0;
  int64_t kv_heads = 0;  // KV heads, from first_kv_head (1 when replicated)
  int64_t first_kv_head = 0;
  int64_t intermediate = 0;         // the dense MLP's, from rank * intermediate
  int64_t expert_intermediate = 0;  // each expert's, from rank * expert_intermediate
  int64_t vocab_chunk = 0;          // ceil(vocab / ranks): what each rank's logits are padded to
  int64_t vocab_begin = 0;          // the LM head's rows [vocab_begin, + vocab_rows)
  int64_t vocab_rows = 0;
};

// The plan of `shard`, or kInvalidInput naming the counts that do not divide
// (heads by ranks; KV heads by ranks, or ranks by KV heads when fewer; the
// intermediate sizes by ranks) or a rank outside [0, ranks).
Result<ShardPlan> plan_shard(const ModelConfig& config, const ArchSpec& arch, Shard shard);

// The config and spec of a rank's part of every layer (heads, KV heads,
// intermediate sizes divided as `plan` says); layer_tensors of them gives the
// shapes of the rank's tensors.
ModelConfig shard_layer_config(const ModelConfig& config, const ShardPlan& plan);
ArchSpec shard_arch(const ArchSpec& arch, const ShardPlan& plan);

// One tensor a rank holds, under its named_weights name and with its shape in
// the rank's part, and where it goes in ModelWeights: `global` (the embedding,
// the final norm, the LM head) or `tensor` of layer `layer`.
struct ShardTensor {
  std::string name;
  std::vector<int64_t> shape;
  TensorView ModelWeights::*global = nullptr;
  int64_t layer = -1;
  LayerTensor tensor{};  // when global is null
};

// The tensors `plan`'s rank holds of layers `range` of a model of `config`
// and `arch` (whole), in the order a shipped shard travels (wire/tp_weights.h):
// the embedding when the range starts at layer 0, every layer's tensors as
// layer_tensors lists them for the rank's part, then the final norm and the
// rank's rows of the LM head when it ends the model. A receiver derives these
// shapes itself; Model::assemble binds tensors of them. A rank whose layers end
// the model holds the LM head's rows only, also when tied to the embedding.
std::vector<ShardTensor> shard_tensors(const ModelConfig& config, const ArchSpec& arch, LayerRange range,
                                       const ShardPlan& plan);

}  // namespace tessera
