// One lane's part of a unit of GGUF blocks in the CUDA matmul (quant_matmul.cu): the
// ring in shared memory a warp streams its weight row through, and the exact integer
// products each lane takes of a unit. Host code too (TS_LANE), so that the lanes'
// integers are checked against the blocks' on any machine
// (tests/backend/quant_lanes_test.cpp); on the device the same code compiles to the
// intrinsics (dp4a, funnel shifts, 16-byte shared-memory reads).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define TS_LANE __host__ __device__ __forceinline__
#else
#define TS_LANE inline
#endif
#if defined(__CUDA_ARCH__)
#define TS_UNROLL _Pragma("unroll")
#else
#define TS_UNROLL
#endif

namespace tessera::cuda {

#if !defined(__CUDACC__)
// CUDA's vector types, for host compilers that do not have them.
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
#endif

// A warp's ring: kStages stages of kStageBytes, kAhead of them in flight.
constexpr int kStageBytes = 512;
constexpr int kStages = 8;  // the ring of a warp: 4 KiB
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kAhead = kStages - 2;  // stages in flight (a round of units spans at most two stages)
constexpr uint32_t kRingMask = kRingBytes / 4 - 1;
// The ring's first bytes again past its end, so that the words of a part that wraps
// are read in a row: a warp's ring takes kRingBytes + kRingTail of shared memory.
constexpr int kRingTail = 48;
constexpr int kRingStride = kRingBytes + kRingTail;

// Where the rounded activations of a call lie in the scratch.
struct Acts {
  int8_t* q = nullptr;   // [tokens][k]
  float* d = nullptr;    // [tokens][k / 32] (Q8_0) or [tokens][k / 256] (Q8_K)
  int16_t* s = nullptr;  // [tokens][k / 16]: Q8_K's sums of 16 values
};

// The sum of the 4 byte products of a and b (signed), plus c.
TS_LANE int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 32; i += 8) c += static_cast<int8_t>(a >> i) * static_cast<int8_t>(b >> i);
  return c;
#endif
}
// The 32 bits of hi:lo from bit `shift` (< 32) on.
TS_LANE uint32_t funnel_right(uint32_t lo, uint32_t hi, uint32_t shift) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, shift);
#else
  return static_cast<uint32_t>((uint64_t{hi} << 32 | lo) >> (shift & 31));
#endif
}
// The f16 in the low 16 bits, as f32.
TS_LANE float f16_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
#else
  return f16_to_f32(static_cast<uint16_t>(bits & 0xffffu));
#endif
}
// 16 bytes at p, 16-byte aligned.
template <typename T>
TS_LANE T load16(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// A unit's bytes and elements, and how many lanes of a group share it.
template <DType kT>
struct Unit {
  static constexpr int kBytes = static_cast<int>(dtype_block_bytes(kT));
  static constexpr int kElems = static_cast<int>(dtype_block_elements(kT));
  static constexpr int kLanes = kT == DType::kQ8_0 ? 2 : kT == DType::kQ4_0 ? 1 : 8;
  static constexpr bool kSums = kElems == 256;  // Q8_K's sums of 16 are read
};

// N 32-bit words of the stream from byte s on (any alignment), out of the ring.
template <int N>
TS_LANE void ring_words(const uint32_t* ring, uint32_t s, uint32_t (&out)[N]) {
  static_assert(4 * N <= kRingTail, "the words past the ring's end are its tail");
  const uint32_t* from = ring + ((s >> 2) & kRingMask);
  const uint32_t shift = (s & 3) * 8;
  uint32_t w[N + 1];
  TS_UNROLL
  for (int i = 0; i <= N; ++i) w[i] = from[i];
  TS_UNROLL
  for (int i = 0; i < N; ++i) out[i] = funnel_right(w[i], w[i + 1], shift);
}
// The 16 bytes of the stream from byte s on, s a multiple of 16: one 16-byte read.
TS_LANE uint4 ring16(const uint32_t* ring, uint32_t s) { return load16<uint4>(ring + ((s >> 2) & kRingMask)); }
// The 2 bytes of the stream at byte s, s even (so they lie in one word), in the low half.
TS_LANE uint32_t ring_half(const uint32_t* ring, uint32_t s) { return ring[(s >> 2) & kRingMask] >> ((s & 2) * 8); }

TS_LANE int dot16(const int4 x, const uint32_t* w) {
  int s = dp4a(static_cast<int>(w[0]), x.x, 0);
  s = dp4a(static_cast<int>(w[1]), x.y, s);
  s = dp4a(static_cast<int>(w[2]), x.z, s);
  return dp4a(static_cast<int>(w[3]), x.w, s);
}
// The sum of 16 activations times `times` (a byte repeated: 0x08080808 is 8).
TS_LANE int sum16(const int4 x, int times) {
  int s = dp4a(times, x.x, 0);
  s = dp4a(times, x.y, s);
  s = dp4a(times, x.z, s);
  return dp4a(times, x.w, s);
}
TS_LANE int4 x16(const int8_t* p) { return load16<int4>(p); }

// ggml's get_scale_min_k4 for sub-blocks 2i and 2i + 1 of a Q4_K/Q5_K unit, whose 12
// scale bytes are the words s0, s1, s2: their 6-bit scales (bytes 2 (i & 1) and
// 2 (i & 1) + 1 of sc) and mins (of m), four sub-blocks a word in 32-bit operations.
TS_LANE void scales_mins(uint32_t s0, uint32_t s1, uint32_t s2, int i, uint32_t& sc, uint32_t& m) {
  sc = i < 2 ? s0 & 0x3f3f3f3fu : (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
  m = i < 2 ? s1 & 0x3f3f3f3fu : ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
}
// One lane's part of unit u (stream byte su) for kTile tokens: P[t] (and M[t] for
// Q4_K/Q5_K) into p/m; returns d_w (dmin_w into dmin). j: the lane within its group.
// Every unit starts on an even stream byte (the row on 16, the blocks even-sized);
// Q4_K and Q5_K units (144 and 176 bytes) on 16, so their parts are 16-byte reads.
template <DType kT, int kTile>
TS_LANE float lane_part(const uint32_t* ring, uint32_t su, int j, int u, const Acts& a, const int64_t (&xt)[kTile],
                        int64_t k, int (&p)[kTile], int (&m)[kTile], float& dmin) {
  if constexpr (kT == DType::kQ8_0) {
    uint32_t w[4];
    ring_words(ring, su + 2 + 16 * j, w);
    TS_UNROLL
    for (int t = 0; t < kTile; ++t) p[t] = dot16(x16(a.q + xt[t] * k + 32 * u + 16 * j), w);
    return f16_bits(ring_half(ring, su));
  } else if constexpr (kT == DType::kQ4_0) {
    uint32_t w[4], lo[4], hi[4];
    ring_words(ring, su + 2, w);
    TS_UNROLL
    for (int i = 0; i < 4; ++i) lo[i] = w[i] & 0x0f0f0f0fu, hi[i] = (w[i] >> 4) & 0x0f0f0f0fu;
    TS_UNROLL
    for (int t = 0; t < kTile; ++t) {
      const int8_t* x = a.q + xt[t] * k + 32 * u;
      const int4 x0 = x16(x), x1 = x16(x + 16);
      p[t] = dot16(x0, lo) + dot16(x1, hi) - sum16(x0, 0x08080808) - sum16(x1, 0x08080808);
    }
    return f16_bits(ring_half(ring, su));
  } else if constexpr (kT == DType::kQ4_K || kT == DType::kQ5_K) {
    constexpr bool kFive = kT == DType::kQ5_K;
    // Sub-blocks 2i (the low nibbles) and 2i + 1 (the high), elements 16h..16h+15 of
    // each. The lanes with i >= 2 take the high nibbles' activations first, so that
    // each 16-byte read of x by a group's 8 lanes hits 8 different bank quads.
    const int i = j >> 1, h = j & 1, first = i >= 2 ? 1 : 0;
    const uint4 head = ring16(ring, su);  // d, dmin, the 12 scale bytes
    const uint4 q = ring16(ring, su + (kFive ? 48 : 16) + 16 * j);
    const uint32_t qs[4] = {q.x, q.y, q.z, q.w};
    uint32_t wa[4], wb[4];
    TS_UNROLL
    for (int e = 0; e < 4; ++e)
      wa[e] = (qs[e] >> (4 * first)) & 0x0f0f0f0fu, wb[e] = (qs[e] >> (4 - 4 * first)) & 0x0f0f0f0fu;
    if constexpr (kFive) {
      const uint4 qh4 = ring16(ring, su + 16 + 16 * h);
      const uint32_t qh[4] = {qh4.x, qh4.y, qh4.z, qh4.w};
      TS_UNROLL
      for (int e = 0; e < 4; ++e) {
        wa[e] |= ((qh[e] >> (2 * i + first)) & 0x01010101u) << 4;
        wb[e] |= ((qh[e] >> (2 * i + 1 - first)) & 0x01010101u) << 4;
      }
    }
    uint32_t sc, mn;
    scales_mins(head.y, head.z, head.w, i, sc, mn);
    const int at = 16 * (i & 1);  // sub-block 2i's byte
    const int sc_a = static_cast<int>((sc >> (at + 8 * first)) & 0xff);
    const int sc_b = static_cast<int>((sc >> (at + 8 - 8 * first)) & 0xff);
    const int m_lo = static_cast<int>((mn >> at) & 0xff), m_hi = static_cast<int>((mn >> (at + 8)) & 0xff);
    TS_UNROLL
    for (int t = 0; t < kTile; ++t) {
      const int8_t* x = a.q + xt[t] * k + 256 * u + 64 * i + 16 * h;
      p[t] = sc_a * dot16(x16(x + 32 * first), wa) + sc_b * dot16(x16(x + 32 - 32 * first), wb);
      const int16_t* sums = a.s + xt[t] * (k / 16) + 16 * u + 4 * i + h;
      m[t] = m_lo * sums[0] + m_hi * sums[2];
    }
    dmin = f16_bits(head.x >> 16);
    return f16_bits(head.x);
  } else {
    static_assert(kT == DType::kQ6_K);
    const int g = j >> 2, c = j & 3;  // elements 128g + 32c .. +31
    uint32_t ql[8], qh[8], q[8];
    ring_words(ring, su + 64 * g + 32 * (c & 1), ql);
    ring_words(ring, su + 128 + 32 * g, qh);
    const uint32_t sc = ring_half(ring, su + 192 + 8 * g + 2 * c);
    TS_UNROLL
    for (int e = 0; e < 8; ++e)
      q[e] = ((ql[e] >> (4 * (c >> 1))) & 0x0f0f0f0fu) | (((qh[e] >> (2 * c)) & 0x03030303u) << 4);
    const int sc_a = static_cast<int8_t>(sc & 0xff), sc_b = static_cast<int8_t>((sc >> 8) & 0xff);
    TS_UNROLL
    for (int t = 0; t < kTile; ++t) {
      const int8_t* x = a.q + xt[t] * k + 256 * u + 128 * g + 32 * c;
      const int16_t* sums = a.s + xt[t] * (k / 16) + 16 * u + 8 * g + 2 * c;  // Q8_K's sums of x's two sixteens
      p[t] = sc_a * (dot16(x16(x), q) - 32 * sums[0]) + sc_b * (dot16(x16(x + 16), q + 4) - 32 * sums[1]);
    }
    return f16_bits(ring_half(ring, su + 208));
  }
}

}  // namespace tessera::cuda
