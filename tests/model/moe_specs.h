// The MoeSpecs the mixture-of-experts tests route with (tests/model/moe_test.cpp
// on the host, tests/gpu/moe_gpu_test.cpp on the GPU): experts 8 wide, the
// routing as each family's arch file would fill it.
#pragma once

#include <cstdint>

#include "model/arch/arch.h"

namespace tessera::testing {

// Softmax over the router's logits, the top_k probabilities, renormalized when
// `normalize` (Mixtral; Qwen3-MoE's norm_topk_prob).
inline MoeSpec softmax_moe(int64_t experts, int64_t top_k, bool normalize) {
  MoeSpec m;
  m.experts = experts;
  m.top_k = top_k;
  m.intermediate = 8;
  m.norm_topk_prob = normalize;
  return m;
}

// GLM-4.5's sigmoid routing: the top_groups best of `groups` groups, then the
// top_k, renormalized when `normalize`, times `scaling` (routed_scaling_factor).
inline MoeSpec sigmoid_groups_moe(int64_t experts, int64_t top_k, int64_t groups, int64_t top_groups, bool normalize,
                                  float scaling) {
  MoeSpec m = softmax_moe(experts, top_k, normalize);
  m.routing = Routing::kSigmoidGroupTopK;
  m.groups = groups;
  m.top_groups = top_groups;
  m.scaling = scaling;
  return m;
}

}  // namespace tessera::testing
