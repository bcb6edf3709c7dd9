// A mixture-of-experts layer on the GPU with no trip to the host
// (Device::route_experts and Device::run_experts; moe.cu):
//
//   route_experts   one warp a token for softmax scores of up to 256 experts and
//                   a top_k of up to 32 (TESSERA_CUDA_MOE_WARP_ROUTE=0: never),
//                   else one block: softmax or sigmoid-group scores, the top_k
//                   (expert_routing.h's arithmetic: bitwise route_token's choice
//                   and weights on the host)
//   run_experts     0. given the router's logits, route_experts first (a lone
//                      token given the router's weight: its matmul and the
//                      routing in one launch, the last block to finish routing);
//                      a lone token's x may come unnormalized with its RMSNorm
//                      (ExpertNorm): the router's and gate/up's blocks normalize
//                      it as they load it, and the norm's launch goes;
//                   1. one block sorts the (token, expert) pairs by expert, then
//                      token, and cuts each expert's pairs into items of up to 8
//                      (or 32) pairs (a lone token skips this launch: its item i
//                      is its i-th lowest expert, found by each block);
//                   2. gate and up with SiLU for every item in one launch, the
//                      expert's weights found from its id in a table of pointers
//                      in device memory (each item reads them once for its pairs;
//                      a lone token's blocks then send down's weights to L2);
//                   3. down for every item in one launch;
//                   4. each token's outputs weighted and added in ascending expert
//                      order into its row of out (no atomics), or onto it (add:
//                      the residual stream, one launch of Device::add fewer).
//                   A lone token of top_k <= 8 on tensor cores takes 3 and 4 in one
//                   launch: a block computes 16 rows of every expert's down and
//                   adds them up itself (TESSERA_CUDA_MOE_DOWN_SUM=0: two launches).
//
// The matmuls are the dense ones' sums: bf16 weights with k a multiple of 64 take
// mma_matmul.cu's tensor-core order (the same mma_half on the same k positions,
// the eight warps' sums added in warp order), others kernels.cu's FMA order, so
// every expert's output is bitwise what Device::matmul gives it, and a token's
// row does not depend on the other tokens of the step. The grid is sized for
// the most items the pairs can make, and blocks past the real count return: the
// host never learns the routing. Every kernel is launched by launch_kernel and
// waits for the earlier kernels before it reads anything (common.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <unordered_map>

#include "backend/buffer.h"
#include "backend/device.h"

namespace tessera::cuda {

// The most routed experts a layer may have here (one block holds a token's scores).
constexpr int64_t kMaxRoutedExperts = 4096;

// Each token's top_k experts and weights, int32 and f32 [tokens, top_k], from the
// router's logits [tokens, routing.experts]; `bias` (null for none) is
// kSigmoidGroups' correction bias of `bias_dtype`.
void route_experts(cudaStream_t stream, const float* logits, int64_t tokens, const ExpertRouting& routing,
                   const void* bias, DType bias_dtype, int32_t* experts, float* weights);

// Whether run_experts takes the router's weight [experts, hidden] for `tokens`
// tokens and computes the logits and the routing in one launch: a lone token,
// bf16 (the tensor-core matmul's sums), when asked for (TESSERA_CUDA_MOE_ROUTER=1;
// measured slower so far); `normed`: x normalized in that launch too (hidden of
// at least 8 chunks, so that every warp is there to add the squares).
bool router_fits(int64_t tokens, const TensorView& router, const ExpertRouting& routing, bool normed);

// What run_experts routes from: the router's logits [tokens, routing.experts]
// and route_experts' bias; null logits: the experts and weights are given. With
// `router` (router_fits), the logits are x's through it, written there first.
struct RouterOutput {
  float* logits = nullptr;
  const void* bias = nullptr;
  DType bias_dtype = DType::kF32;
  const void* router = nullptr;  // bf16 [routing.experts, hidden]
};

// A layer's experts as the kernels find them: device arrays of `experts` weight
// pointers, all of one dtype: gate and up [inter, hidden], down [hidden, inter].
struct ExpertTable {
  const void* const* gate = nullptr;
  const void* const* up = nullptr;
  const void* const* down = nullptr;
  DType dtype = DType::kBF16;
  int64_t experts = 0;
  int64_t hidden = 0;
  int64_t inter = 0;
  unsigned* counter = nullptr;  // a word of the layer's own, zero between launches (the router's launch counts in it)
};

// x's RMSNorm as the experts' kernels apply it while they load x (null weight:
// x as it is): weight * (x * scale), bitwise rms_norm's row, scale from
// block_rms_scale (common.cuh) as rms_norm computes it.
struct ExpertNorm {
  const void* weight = nullptr;  // bf16 [hidden]
  float eps = 0.0f;
};

// Whether run_experts normalizes x itself for `tokens` tokens (ExpertNorm): a
// lone token of at most 32 experts whose gate/up take the tensor cores, a bf16
// norm weight, when asked for (TESSERA_CUDA_MOE_NORM=1) until it has run on a GPU.
// Its router's matmul then normalizes too (the decode matmul's normalizing job).
bool experts_norm_fits(int64_t tokens, int64_t top_k, const ExpertTable& table, DType norm_dtype);

// Scratch bytes run_experts needs for `tokens` tokens.
size_t experts_scratch(int64_t tokens, int64_t top_k, const ExpertTable& table);
// out [tokens, hidden] = each token's sum over its experts (ascending) of weight *
// down(silu(gate x) * up x), from route_experts' experts and weights [tokens,
// top_k], which it writes first from `router` when that has logits; with `add`,
// out += that sum (the sum rounded, then the add: what Device::add gives). With
// `norm` (experts_norm_fits), x is normalized as it is read: out may be x then.
void run_experts(cudaStream_t stream, const float* x, int64_t tokens, const ExpertRouting& routing,
                 const RouterOutput& router, int32_t* experts, float* weights, const ExpertTable& table, void* scratch,
                 float* out, bool add, const ExpertNorm& norm = {});

// What the CUDA device keeps for its experts between calls: the scratch, and each
// layer's table, found by the layer's first gate weight (placed weights stay put
// until the device is destroyed).
struct ExpertState {
  struct Layer {
    Buffer pointers;
    ExpertTable table;
  };
  Buffer scratch;
  std::unordered_map<const void*, Layer> layers;
};

}  // namespace tessera::cuda
