// MoeMlp: the mixture-of-experts MLP of a decoder layer, run by Forward on its
// Device for one step of any number of tokens.
//
//   router logits [tokens, experts] = x * router^T        (device matmul, or run_experts)
//   each token's top_k experts and weights                 (fixed order)
//   for each expert e hit, in ascending order, once for all its tokens:
//     rows = the tokens routed to e (ascending); xe = x[rows]
//     out[rows] += weight * down(silu(gate(xe)) * up(xe))
//   with a shared expert (GLM-4.5): out += shared(x)      (every token)
//
// A device that can (the GPU: Device::run_experts given the router) does the
// router's matmul, the routing and the experts itself, with no trip to the host
// and bitwise the same numbers; on the others (the CPU) routing runs on the host from the
// downloaded logits (tokens * experts floats a layer, and the router's
// correction bias, experts floats, for kSigmoidGroupTopK), and the experts run
// through matmul, one expert at a time (a lone token's gate and up of all its
// experts in one Device::matmuls call, x being the same for all of them, and
// their downs in one Device::matmuls_each call).
//
// So each expert's weights are read once per step for all the tokens routed to
// it (on the GPU, once per item of up to 32 of them: cuda/moe.cuh), and an
// expert no token picked is not read at all (batch-1 decode reads top_k experts
// a layer). A token's output is bitwise the same whatever else
// shares its step: its row of every matmul is summed alone (Device's batch
// invariance), and its experts' outputs are added to a zeroed row in ascending
// expert order, as transformers' index_add_ does.
//
// Not thread-safe: one per Forward.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/device.h"
#include "core/status.h"
#include "model/arch/arch.h"
#include "model/model.h"

namespace tessera {

// One token's choice: expert indices and their weights, top_k of each.
struct Route {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

// The route of one token from its router logits [experts], as `moe.routing`
// says (arch.h); `bias` [experts] is kSigmoidGroupTopK's correction bias (null:
// zeros). Among equal scores the lower expert (or group) index wins: torch.topk's
// order for exact ties is its own, and with real logits they do not occur
// except where kSigmoidGroupTopK's masked experts all score 0, where the lower
// index is what torch.topk on the CPU picks for the fixtures. Its arithmetic is
// expert_routing.h's, which the GPU's routing shares.
Route route_token(const MoeSpec& moe, const float* logits, const float* bias = nullptr);

// MoeSpec's routing, as a Device takes it.
ExpertRouting expert_routing(const MoeSpec& moe);

class MoeMlp {
 public:
  // Grows the scratch for a step of `tokens` tokens.
  Status reserve(Device& device, int64_t hidden, const MoeSpec& moe, int64_t tokens);
  // out [tokens, hidden] = the experts' weighted sum for x [tokens, hidden]
  // (device memory), x RMS-normalized by `norm` first when it has a weight
  // (into norm.scratch, or by a GPU's experts as they load x); with `add`, out
  // += that sum, bitwise the sum and then Device::add (Forward's residual stream:
  // a GPU adds it as it writes it; out may be x itself then).
  void run(Device& device, const LayerWeights& w, const MoeSpec& moe, const float* x, int64_t tokens, int64_t hidden,
           float* out, bool add = false, const RowNorm& norm = {});

 private:
  // Routing on the host, then each expert hit through matmul (devices without route_experts).
  void run_on_host(Device& device, const LayerWeights& w, const MoeSpec& moe, const float* x, int64_t tokens,
                   int64_t hidden, float* out);
  // The router's correction bias of `w` as f32 on the host (downloaded each run: experts values).
  const float* router_bias(Device& device, const LayerWeights& w);

  Buffer logits_, xe_, gate_, up_, down_, scale_, sum_;  // device scratch
  Buffer experts_;                                       // int32 [tokens, top_k]: the routed experts (device routing)
  std::vector<float> host_logits_, zeros_, bias_;
  std::vector<uint8_t> bias_bytes_;
};

}  // namespace tessera
