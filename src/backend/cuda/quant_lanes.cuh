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

// A warp's ring: kStages stages of kStageBytes, Unit<kT>::kAhead of them in flight (the
// lean kernels: stages of kLeanStageBytes, Unit<kT>::kAheadOf<kLeanStageBytes>).
constexpr int kStageBytes = 512;
constexpr int kLeanStageBytes = 1024;
constexpr int kStages = 8;  // the ring of a warp: 4 KiB
constexpr int kRingBytes = kStages * kStageBytes;
constexpr uint32_t kRingMask = kRingBytes / 4 - 1;
// The ring's first bytes again past its end, so that the words of a part that wraps
// are read in a row: a warp's ring takes kRingBytes and a tail of at least kRingTail
// bytes (Unit::kStride) of shared memory.
constexpr int kRingTail = 48;

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
// c + the two signed 16-bit halves of a times the two low (signed) bytes of b.
TS_LANE int dp2a_lo(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp2a_lo(a, b, c);
#else
  return c + static_cast<int16_t>(a) * static_cast<int8_t>(b) +
         static_cast<int16_t>(a >> 16) * static_cast<int8_t>(b >> 8);
#endif
}
// c + the 4 products of a's bytes (unsigned) and b's (signed).
TS_LANE int dp4a_us(uint32_t a, int b, int c) {
#if defined(__CUDA_ARCH__)
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  for (int i = 0; i < 32; i += 8) c += static_cast<int>((a >> i) & 0xff) * static_cast<int8_t>(b >> i);
  return c;
#endif
}
// Byte b (0 or 1) of x, signed.
TS_LANE int signed_byte(uint32_t x, int b) {
#if defined(__CUDA_ARCH__)
  int d;  // prmt: byte b, then its sign in bytes 1-3
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(x), "r"(0x8880 + 0x1111 * b));
  return d;
#else
  return static_cast<int8_t>(x >> (8 * b));
#endif
}
// Bytes of y:x (x bytes 0-3, y bytes 4-7), byte i of the result chosen by nibble i of s (each < 8).
TS_LANE uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t v = uint64_t{y} << 32 | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
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
// The T at p (aligned to sizeof(T): 16 bytes for the vector types).
template <typename T>
TS_LANE T load(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// A unit's bytes and elements; the lanes that share one; the groups of a row's units
// (unit u to group u % kGroups, quant_matmul.cu), which fix the order of its f32 steps;
// and the halves of the warp (two when a group's lanes take half of it: half 0 takes
// units u of a round, half 1 units u + kGroups, so that each lane reads more bytes of a
// unit a round and the per-unit work is shared by fewer bytes).
template <DType kT>
struct Unit {
  static constexpr int kBytes = static_cast<int>(dtype_block_bytes(kT));
  static constexpr int kElems = static_cast<int>(dtype_block_elements(kT));
  static constexpr int kLanes = kT == DType::kQ8_0 || kT == DType::kQ4_0 ? 1 : 4;
  static constexpr int kGroups = kT == DType::kQ8_0 ? 16 : kT == DType::kQ4_0 ? 32 : 4;
  static constexpr int kHalves = 32 / (kLanes * kGroups);
  static constexpr int kRound = kHalves * kGroups;  // units a round of the warp
  static constexpr bool kSums = kElems == 256;      // Q8_K's sums of 16 are read
  // Stages of kStage bytes in flight: a round of kRound units spans at most
  // kRingBytes / kStage - kAheadOf + 1 stages.
  template <int kStage>
  static constexpr int kAheadOf = kRingBytes / kStage - (kRound * kBytes + kStage - 1) / kStage;
  static constexpr int kAhead = kAheadOf<kStageBytes>;
  static_assert(kHalves * kLanes * kGroups == 32 && kAhead >= 3 && kAheadOf<kLeanStageBytes> >= 2);
  // The ring's tail: Q4_K's and Q6_K's hold a whole unit, so that a lane reads its unit's
  // words from one index into the ring (lane_part's kLean); the others kRingTail.
  static constexpr int kTail = kT == DType::kQ4_K || kT == DType::kQ6_K ? (kBytes + 15) / 16 * 16 : kRingTail;
  static constexpr int kStride = kRingBytes + kTail;  // a warp's ring in shared memory
};

// N 32-bit words of the stream from byte s on (any alignment), out of the ring.
// N words from word `from` of the ring on, shifted right by `shift` bits (a unit's words
// past the ring's end lie in its tail).
template <int N>
TS_LANE void words_at(const uint32_t* from, uint32_t shift, uint32_t (&out)[N]) {
  uint32_t w[N + 1];
  TS_UNROLL
  for (int i = 0; i <= N; ++i) w[i] = from[i];
  TS_UNROLL
  for (int i = 0; i < N; ++i) out[i] = funnel_right(w[i], w[i + 1], shift);
}
// N 32-bit words of the stream from byte s on (any alignment), out of the ring.
template <int N>
TS_LANE void ring_words(const uint32_t* ring, uint32_t s, uint32_t (&out)[N]) {
  static_assert(4 * N <= kRingTail, "the words past the ring's end are its tail");
  words_at(ring + ((s >> 2) & kRingMask), (s & 3) * 8, out);
}
// The 16 bytes of the stream from byte s on, s a multiple of 16: one 16-byte read.
TS_LANE uint4 ring16(const uint32_t* ring, uint32_t s) { return load<uint4>(ring + ((s >> 2) & kRingMask)); }
// The 2 bytes of the stream at byte s, s even (so they lie in one word), in the low half.
TS_LANE uint32_t ring_half(const uint32_t* ring, uint32_t s) { return ring[(s >> 2) & kRingMask] >> ((s & 2) * 8); }

// c + the 16 products of the activations x and the bytes of w[0..3] (kUnsigned: taken unsigned).
template <bool kUnsigned = false>
TS_LANE int dot16(const int4 x, const uint32_t* w, int c = 0) {
  if constexpr (kUnsigned) {
    c = dp4a_us(w[0], x.x, c);
    c = dp4a_us(w[1], x.y, c);
    c = dp4a_us(w[2], x.z, c);
    return dp4a_us(w[3], x.w, c);
  }
  c = dp4a(static_cast<int>(w[0]), x.x, c);
  c = dp4a(static_cast<int>(w[1]), x.y, c);
  c = dp4a(static_cast<int>(w[2]), x.z, c);
  return dp4a(static_cast<int>(w[3]), x.w, c);
}
// The sum of 16 activations times `times` (a byte repeated: 0x08080808 is 8).
TS_LANE int sum16(const int4 x, int times) {
  int s = dp4a(times, x.x, 0);
  s = dp4a(times, x.y, s);
  s = dp4a(times, x.z, s);
  return dp4a(times, x.w, s);
}
TS_LANE int4 x16(const int8_t* p) { return load<int4>(p); }
// The two int16 at p (4-byte aligned) as one word, the first in the low half.
TS_LANE int pair16(const int16_t* p) { return load<int>(p); }

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
// A lane reads x in pieces of 16 bytes in an order of its own (from u and j), so that
// the 8 lanes of a quarter warp read 8 different bank quads of shared memory.
// kLean (the lean kernels, where asked for): Q4_K's and Q6_K's weights unpacked in fewer
// operations, from one index into the ring (Unit::kTail), to the same integers.
template <DType kT, int kTile, bool kLean = true>
TS_LANE float lane_part(const uint32_t* ring, uint32_t su, int j, int u, const Acts& a, const int64_t (&xt)[kTile],
                        int64_t k, int (&p)[kTile], int (&m)[kTile], float& dmin) {
  if constexpr (kT == DType::kQ8_0) {
    // The whole unit: its sixteens in the order r, 1 - r.
    const int r = (u >> 2) & 1;
    uint32_t wa[4], wb[4];
    ring_words(ring, su + 2 + 16 * r, wa);
    ring_words(ring, su + 18 - 16 * r, wb);
    TS_UNROLL
    for (int t = 0; t < kTile; ++t) {
      const int8_t* x = a.q + xt[t] * k + 32 * u;
      p[t] = dot16(x16(x + 16 - 16 * r), wb, dot16(x16(x + 16 * r), wa));
    }
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
    // Lane i = j takes sub-blocks 2i (the low nibbles of qs bytes 32i..32i+31) and 2i + 1
    // (the high ones), each as two sixteens h. Its reads 0, 1 take sub-block 2i + rb,
    // reads 2, 3 the other; reads 0, 2 its sixteen r0, reads 1, 3 the other.
    // kMasked (Q4_K, kLean): the unit's words from one index (Unit::kTail holds a unit past
    // the ring's end), and each word of weights takes one operation: the high nibbles stay
    // where they lie (unsigned bytes, 16 times their values), the low ones' scales are
    // taken 16 times, and the lane's sum, 16 times its part exactly, is divided by 16.
    constexpr bool kMasked = !kFive && kLean;
    const int i = j, rb = i >> 1, r0 = u & 1;
    const uint32_t* unit = ring + ((su >> 2) & kRingMask);              // (kMasked) the unit's words from here
    const uint4 head = kMasked ? load<uint4>(unit) : ring16(ring, su);  // d, dmin, the 12 scale bytes
    const uint32_t at = su + (kFive ? 48 : 16) + 32 * i;
    const uint4 qa4 = kMasked ? load<uint4>(unit + 4 + 8 * i + 4 * r0) : ring16(ring, at + 16 * r0),
                qb4 = kMasked ? load<uint4>(unit + 8 + 8 * i - 4 * r0) : ring16(ring, at + 16 - 16 * r0);
    const uint32_t qa[4] = {qa4.x, qa4.y, qa4.z, qa4.w}, qb[4] = {qb4.x, qb4.y, qb4.z, qb4.w};
    uint32_t w[4][4];  // the weights of reads 0..3
    if constexpr (kMasked) {
      const uint32_t mask = 0x0f0f0f0fu << (4 * rb);  // reads 0, 1: sub-block 2i + rb's nibbles
      TS_UNROLL
      for (int e = 0; e < 4; ++e)
        w[0][e] = qa[e] & mask, w[1][e] = qb[e] & mask, w[2][e] = qa[e] ^ w[0][e], w[3][e] = qb[e] ^ w[1][e];
    } else {
      TS_UNROLL
      for (int e = 0; e < 4; ++e) {
        w[0][e] = (qa[e] >> (4 * rb)) & 0x0f0f0f0fu, w[1][e] = (qb[e] >> (4 * rb)) & 0x0f0f0f0fu;
        w[2][e] = (qa[e] >> (4 - 4 * rb)) & 0x0f0f0f0fu, w[3][e] = (qb[e] >> (4 - 4 * rb)) & 0x0f0f0f0fu;
      }
    }
    if constexpr (kFive) {
      const uint4 ha4 = ring16(ring, su + 16 + 16 * r0), hb4 = ring16(ring, su + 32 - 16 * r0);
      const uint32_t ha[4] = {ha4.x, ha4.y, ha4.z, ha4.w}, hb[4] = {hb4.x, hb4.y, hb4.z, hb4.w};
      TS_UNROLL
      for (int e = 0; e < 4; ++e) {
        w[0][e] |= ((ha[e] >> (2 * i + rb)) & 0x01010101u) << 4, w[1][e] |= ((hb[e] >> (2 * i + rb)) & 0x01010101u)
                                                                            << 4;
        w[2][e] |= ((ha[e] >> (2 * i + 1 - rb)) & 0x01010101u) << 4;
        w[3][e] |= ((hb[e] >> (2 * i + 1 - rb)) & 0x01010101u) << 4;
      }
    }
    uint32_t sc, mn;
    scales_mins(head.y, head.z, head.w, i, sc, mn);
    const int b = 2 * (i & 1);  // sub-block 2i's byte of sc and mn
    const int sc_a = static_cast<int>((sc >> (8 * (b + rb))) & 0xff) << (kMasked ? 4 - 4 * rb : 0),
              sc_b = static_cast<int>((sc >> (8 * (b + 1 - rb))) & 0xff) << (kMasked ? 4 * rb : 0);
    // The mins of sub-blocks 2i and 2i + 1, each in both low bytes: dp2a with x's two sums of 16.
    const int m_lo = static_cast<int>(byte_perm(mn, 0, b * 0x11)),
              m_hi = static_cast<int>(byte_perm(mn, 0, (b + 1) * 0x11));
    TS_UNROLL
    for (int t = 0; t < kTile; ++t) {
      const int8_t* x = a.q + xt[t] * k + 256 * u + 64 * i;
      const int8_t *xa = x + 32 * rb, *xb = x + 32 - 32 * rb;
      const int pa = dot16<kMasked>(x16(xa + 16 - 16 * r0), w[1], dot16<kMasked>(x16(xa + 16 * r0), w[0]));
      const int pb = dot16<kMasked>(x16(xb + 16 - 16 * r0), w[3], dot16<kMasked>(x16(xb + 16 * r0), w[2]));
      p[t] = kMasked ? (sc_a * pa + sc_b * pb) >> 4 : sc_a * pa + sc_b * pb;
      const int16_t* sums = a.s + xt[t] * (k / 16) + 16 * u + 4 * i;  // Q8_K's sums of x's four sixteens
      m[t] = dp2a_lo(pair16(sums + 2), m_hi, dp2a_lo(pair16(sums), m_lo, 0));
    }
    dmin = f16_bits(head.x >> 16);
    return f16_bits(head.x);
  } else {
    static_assert(kT == DType::kQ6_K);
    // Lane j takes elements 128g + 32c + 0..31 for c = c0 and c0 + 2 (g = j >> 1, c0 = j & 1):
    // the low and the high nibbles of ql bytes 64g + 32c0.., the bits 2c of qh bytes 128 + 32g..,
    // each as two sixteens h. Its reads 0, 1 take c = ca, reads 2, 3 c = cb; reads 0, 2 its
    // sixteen r0, reads 1, 3 the other.
    const int g = j >> 1, c0 = j & 1, rb = g, r0 = u & 1;
    const int ca = c0 + 2 * rb, cb = c0 + 2 - 2 * rb;
    uint32_t la[4], lb[4], ha[4], hb[4];
    if constexpr (kLean) {  // from one index (Unit::kTail holds a unit past the ring's end)
      const uint32_t *unit = ring + ((su >> 2) & kRingMask), shift = (su & 3) * 8;
      words_at(unit + 16 * g + 8 * c0 + 4 * r0, shift, la);
      words_at(unit + 16 * g + 8 * c0 + 4 - 4 * r0, shift, lb);
      words_at(unit + 32 + 8 * g + 4 * r0, shift, ha);
      words_at(unit + 32 + 8 * g + 4 - 4 * r0, shift, hb);
    } else {
      ring_words(ring, su + 64 * g + 32 * c0 + 16 * r0, la);
      ring_words(ring, su + 64 * g + 32 * c0 + 16 - 16 * r0, lb);
      ring_words(ring, su + 128 + 32 * g + 16 * r0, ha);
      ring_words(ring, su + 128 + 32 * g + 16 - 16 * r0, hb);
    }
    uint32_t w[4][4];  // the weights of reads 0..3
    if constexpr (kLean) {
      // t = qh >> 2 c0 & 0x33333333 holds c0's bits at 0-1 and c0 + 2's at 4-5 of each byte, so
      // c0's weights are (l & 0x0f) | (t << 4 & 0xf0) and c0 + 2's (l >> 4 & 0x0f) | (t & 0xf0).
      const int l_a = 4 * rb, t_a = 4 - 4 * rb;  // reads 0, 1 (c = ca); reads 2, 3 the other way
      TS_UNROLL
      for (int e = 0; e < 4; ++e) {
        const uint32_t ta = (ha[e] >> (2 * c0)) & 0x33333333u, tb = (hb[e] >> (2 * c0)) & 0x33333333u;
        w[0][e] = ((la[e] >> l_a) & 0x0f0f0f0fu) | ((ta << t_a) & 0xf0f0f0f0u);
        w[1][e] = ((lb[e] >> l_a) & 0x0f0f0f0fu) | ((tb << t_a) & 0xf0f0f0f0u);
        w[2][e] = ((la[e] >> t_a) & 0x0f0f0f0fu) | ((ta << l_a) & 0xf0f0f0f0u);
        w[3][e] = ((lb[e] >> t_a) & 0x0f0f0f0fu) | ((tb << l_a) & 0xf0f0f0f0u);
      }
      // The int8 scales of c's sixteens 0 (the low byte) and 1, at 192 + 8g + 2c; their sums
      // with Q8_K's sums of x by dp2a (the same pairs, whichever sixteen comes first).
      const uint32_t sa = ring_half(ring, su + 192 + 8 * g + 2 * ca), sb = ring_half(ring, su + 192 + 8 * g + 2 * cb);
      const int sc0 = signed_byte(sa, r0), sc1 = signed_byte(sa, 1 - r0);
      const int sc2 = signed_byte(sb, r0), sc3 = signed_byte(sb, 1 - r0);
      TS_UNROLL
      for (int t = 0; t < kTile; ++t) {
        const int8_t* x = a.q + xt[t] * k + 256 * u + 128 * g;
        const int8_t *xa = x + 32 * ca, *xb = x + 32 * cb;
        const int16_t* sums = a.s + xt[t] * (k / 16) + 16 * u + 8 * g;
        const int mins = dp2a_lo(pair16(sums + 2 * cb), static_cast<int>(sb),
                                 dp2a_lo(pair16(sums + 2 * ca), static_cast<int>(sa), 0));
        p[t] = sc0 * dot16(x16(xa + 16 * r0), w[0]) + sc1 * dot16(x16(xa + 16 - 16 * r0), w[1]) +
               sc2 * dot16(x16(xb + 16 * r0), w[2]) + sc3 * dot16(x16(xb + 16 - 16 * r0), w[3]) - 32 * mins;
      }
    } else {
      TS_UNROLL
      for (int e = 0; e < 4; ++e) {
        w[0][e] = ((la[e] >> (4 * rb)) & 0x0f0f0f0fu) | (((ha[e] >> (2 * ca)) & 0x03030303u) << 4);
        w[1][e] = ((lb[e] >> (4 * rb)) & 0x0f0f0f0fu) | (((hb[e] >> (2 * ca)) & 0x03030303u) << 4);
        w[2][e] = ((la[e] >> (4 - 4 * rb)) & 0x0f0f0f0fu) | (((ha[e] >> (2 * cb)) & 0x03030303u) << 4);
        w[3][e] = ((lb[e] >> (4 - 4 * rb)) & 0x0f0f0f0fu) | (((hb[e] >> (2 * cb)) & 0x03030303u) << 4);
      }
      // The int8 scales of c's sixteens 0 (the low byte) and 1, at 192 + 8g + 2c.
      const uint32_t sa = ring_half(ring, su + 192 + 8 * g + 2 * ca), sb = ring_half(ring, su + 192 + 8 * g + 2 * cb);
      const int sc0 = static_cast<int8_t>(sa >> (8 * r0)), sc1 = static_cast<int8_t>(sa >> (8 - 8 * r0));
      const int sc2 = static_cast<int8_t>(sb >> (8 * r0)), sc3 = static_cast<int8_t>(sb >> (8 - 8 * r0));
      TS_UNROLL
      for (int t = 0; t < kTile; ++t) {
        const int8_t* x = a.q + xt[t] * k + 256 * u + 128 * g;
        const int8_t *xa = x + 32 * ca, *xb = x + 32 * cb;
        const int16_t* sums = a.s + xt[t] * (k / 16) + 16 * u + 8 * g;  // Q8_K's sums of x's sixteens
        const int s_a = pair16(sums + 2 * ca), s_b = pair16(sums + 2 * cb);
        const int s0 = static_cast<int16_t>(s_a >> (16 * r0)), s1 = static_cast<int16_t>(s_a >> (16 - 16 * r0));
        const int s2 = static_cast<int16_t>(s_b >> (16 * r0)), s3 = static_cast<int16_t>(s_b >> (16 - 16 * r0));
        p[t] = sc0 * (dot16(x16(xa + 16 * r0), w[0]) - 32 * s0) +
               sc1 * (dot16(x16(xa + 16 - 16 * r0), w[1]) - 32 * s1) +
               sc2 * (dot16(x16(xb + 16 * r0), w[2]) - 32 * s2) + sc3 * (dot16(x16(xb + 16 - 16 * r0), w[3]) - 32 * s3);
      }
    }
    return f16_bits(ring_half(ring, su + 208));
  }
}

}  // namespace tessera::cuda
