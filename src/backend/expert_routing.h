// ExpertRouting: how a mixture of experts picks each token's experts, as a
// device reads it (model/moe.h fills it from the family's MoeSpec), and the
// arithmetic of a routing score, compiled once for the host (model/moe.cpp's
// route_token) and once for the GPU (cuda/moe.cu), so that both choose the same
// experts with bitwise the same weights.
//
// That needs the same operations, each rounded once: the exponential is our own
// (routing_exp below: a range reduction and a polynomial in fused multiply-adds,
// within about 1 ulp of exp), not the host's libm or CUDA's expf, which differ in
// their last bits; the GPU's additions, products and quotients are the _rn
// intrinsics, which the compiler never fuses into a multiply-add. (The host side
// relies on no contraction of a * b + c: x86-64 without -mfma has no such
// instruction to contract to.)
//
// Pure functions; any thread.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TS_HOST_DEVICE __host__ __device__
#else
#define TS_HOST_DEVICE
#endif

namespace tessera {

enum class ExpertScoring : int32_t {
  // softmax over the router's logits, the top_k probabilities (Mixtral, Qwen3-MoE)
  kSoftmax = 0,
  // sigmoid scores; the choice adds a correction bias and keeps the `top_groups`
  // best of `groups` groups, each scored by its two best (GLM-4.5, DeepSeek-V3's noaux_tc)
  kSigmoidGroups = 1,
};

struct ExpertRouting {
  ExpertScoring scoring = ExpertScoring::kSoftmax;
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t groups = 1;
  int64_t top_groups = 1;
  bool normalize = false;  // the top_k weights divided by their sum (norm_topk_prob)
  float scaling = 1.0f;    // every weight multiplied by it (routed_scaling_factor)
};

namespace routing {

TS_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TS_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TS_HOST_DEVICE inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
TS_HOST_DEVICE inline float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// The nearest integer, ties to even.
TS_HOST_DEVICE inline float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}
// 2^e for e in [-126, 127].
TS_HOST_DEVICE inline float pow2(int e) {
#if defined(__CUDA_ARCH__)
  return __int_as_float((e + 127) << 23);
#else
  return std::bit_cast<float>((e + 127) << 23);
#endif
}

// e^x: x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts, Cody and Waite),
// e^r by Cephes' expf polynomial, then times 2^n in at most three exact or
// once-rounded products (results below 2^-126 are rounded once, to subnormals).
TS_HOST_DEVICE inline float routing_exp(float x) {
  if (x != x) return x;
  if (x > 88.72283172607421875f) return INFINITY;
  if (x < -103.97208404541015625f) return 0.0f;  // below half the smallest subnormal
  const float n = round_even(mul(x, 1.44269504088896341f));
  float r = fma(n, -0.693359375f, x);
  r = fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fma(p, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  p = add(fma(p, mul(r, r), r), 1.0f);
  int e = static_cast<int>(n);
  if (e > 127) {
    p = mul(p, 2.0f);
    --e;
  }
  if (e < -126) {
    p = mul(p, pow2(-64));
    e += 64;
  }
  return mul(p, pow2(e));
}

// A token's probability of expert e under softmax, before dividing by the sum:
// e^(logit - the row's largest logit).
TS_HOST_DEVICE inline float softmax_term(float logit, float max) { return routing_exp(add(logit, -max)); }

// transformers' sigmoid: 1 / (1 + e^-x).
TS_HOST_DEVICE inline float sigmoid(float x) { return div(1.0f, add(1.0f, routing_exp(-x))); }

// The order of a choice: the larger score first, and among equal scores the
// lower index (NaN scores rank last).
TS_HOST_DEVICE inline bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  if (a != a) return b != b && ia < ib;
  if (b != b) return true;
  return a > b || (a == b && ia < ib);
}

}  // namespace routing
}  // namespace tessera
