// Q4_0 weights in kQuantGroup's layout (weight_layout.h) against Q8_0 activations by AMX-INT8
// tile products (tdpbssd), written once over an `Ops` type that supplies the tiles, the
// instruction and the f32 step:
//   - amx.cpp instantiates it with the instructions themselves;
//   - the tests instantiate it with a portable emulation (amx_emulated.h).
// Every standard header it uses, quant_act.h and weight_layout.h must be included before it.
//
// The order is quant_dot.h's, the one quant_groups.cpp's kernels take: for each row and
// token, unit (block of 32) by unit, acc = fma(d_w * d_x, float(P), acc), P the unit's exact
// integer sum of (q - 8) x. A tile product makes P for 16 tokens x 16 rows at once, and
// integer sums are exact in any order, so every output is bitwise the vector kernels' (and
// a token's row the same in any batch, alone or among others).
//
// Tiles: C = tile 0 to 3 (16 tokens x 16 rows of int32), A = tile 4 or 5 (16 tokens x 64
// int8: a pair of units' x, packed by pack_x), B = tile 6 or 7 (16 rows of 64 bytes: row p
// the 16 weight rows' q - 8 at elements 4p..4p + 3 of the pair, the VNNI layout tdpbssd
// takes, the other unit's 8 rows zero). Every tile is whole (64-byte rows, 16 of them): the
// products of a unit alone (32 int8 of k, B of 8 rows) are as fast alone but 4-6 times
// slower beside the tile loads on the Sapphire Rapids measured, so each product takes a pair
// of units' x and one unit's weights, and half of its products are by zero.
// Unit u's product takes C u % 4, A (u / 2) % 2 and B u % 2 and runs two units ahead of its
// f32 step; its C tile goes to memory a unit before the vectors read it. A group's unit (an
// f16 d a row, then 4 slices of 64 bytes, slice j 4 nibble bytes of every row: elements 4j..4j
// + 3 low, 16 + 4j.. high) becomes its B rows j (low nibbles) and 4 + j (high ones) with no
// transposition.
//
// Ops (all static): configure() (palette 1: those shapes); release(); zero<T>(); load<T>(p,
// stride) and store<T>(p, stride) (a tile's rows `stride` bytes apart); dot<C, A, B>()
// (tdpbssd, for (c, 4 + c / 2, 6 + c % 2)); an accumulator type Acc of 16 tokens x 16 rows of
// f32, with clear(acc), step(acc, dw, dx, p) (for t < 16 and r < 16: acc(t, r) = fma(dw[r]
// * dx[t], float(p[16 t + r]), acc(t, r))) and finish(acc, y, ldy)
// (acc(t, r) to y[t * ldy + r]).
#ifndef TESSERA_BACKEND_CPU_AMX_INT8_KERNEL_H_
#define TESSERA_BACKEND_CPU_AMX_INT8_KERNEL_H_

namespace tessera::cpu::amx::int8 {

inline constexpr int64_t kTokens = 16;          // tokens of a tile product
inline constexpr int64_t kTileBytes = 16 * 64;  // a whole tile: a unit's B, a pair's A

// The B tiles of a group's `units` units (out: kTileBytes each, unit u's rows at 8 (u % 2),
// the others zero) and the rows' d as f32 (dw: 16 a unit).
static inline void unpack_q4_0(const uint8_t* group, int64_t units, int8_t* out, float* dw) {
  constexpr int64_t kUnitBytes = quant_unit_bytes(DType::kQ4_0);
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* unit = group + u * kUnitBytes;
    for (int64_t r = 0; r < kQuantGroup; ++r) {
      uint16_t bits;
      std::memcpy(&bits, unit + 2 * r, sizeof(bits));
      dw[u * kQuantGroup + r] = f16_to_f32(bits);
    }
    int8_t* b = out + u * kTileBytes;
    std::memset(b + (1 - u % 2) * kTileBytes / 2, 0, kTileBytes / 2);
    b += u % 2 * kTileBytes / 2;
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t i = 0; i < 64; ++i) {
        const uint8_t v = unit[2 * kQuantGroup + 64 * j + i];
        b[64 * j + i] = static_cast<int8_t>((v & 15) - 8);
        b[64 * (4 + j) + i] = static_cast<int8_t>((v >> 4) - 8);
      }
  }
}

// Pairs of units (the last one's second unit zeros when units is odd).
static inline int64_t pairs_of(int64_t units) { return (units + 1) / 2; }

// x (token t's unit u at x[t * units + u]; tokens a multiple of 16) as the A tiles take
// it: token tile i's pair of units q at xa + (i * pairs_of(units) + q) * kTileBytes (its 16
// tokens' 64 int8, 64 bytes apart), a unit's d at xd + (i * units + u) * 16 + t % 16.
static inline void pack_x(const Q8Block* x, int64_t tokens, int64_t units, int8_t* xa, float* xd) {
  const int64_t pairs = pairs_of(units);
  for (int64_t t = 0; t < tokens; ++t) {
    int8_t* row = xa + (t / kTokens * pairs * kTokens + t % kTokens) * 64;
    for (int64_t u = 0; u < units; ++u) {
      std::memcpy(row + u / 2 * kTileBytes + u % 2 * 32, x[t * units + u].qs, 32);
      xd[(t / kTokens * units + u) * kTokens + t % kTokens] = x[t * units + u].d;
    }
    if (units % 2 != 0) std::memset(row + units / 2 * kTileBytes + 32, 0, 32);
  }
}

// Block g's product (32 elements of k: a Q4_0 unit, a Q4_K sub-block) into C tile kC (g %
// 4), from A tile 4 + kC / 2 (the pair g / 2 of xa, loaded by the pair's first block) and B
// tile 6 + kC % 2 (b's tile g).
template <typename Ops, int kC>
void product(const int8_t* xa, const int8_t* b, int64_t g) {
  constexpr int kA = 4 + kC / 2, kB = 6 + kC % 2;
  if constexpr (kC % 2 == 0) Ops::template load<kA>(xa + g / 2 * kTileBytes, 64);
  Ops::template zero<kC>();
  Ops::template load<kB>(b + g * kTileBytes, 64);
  Ops::template dot<kC, kA, kB>();
}

// Step g of `products` (kC = g % 4): block g + 2's product, block g's sums out to p (half
// g % 2), then block g - 1's sums to `take` from the other half.
template <typename Ops, int kC, typename Take>
void pipelined(const int8_t* xa, const int8_t* b, int64_t blocks, int32_t* p, int64_t g, Take& take) {
  constexpr int64_t kSums = kTokens * kQuantGroup;
  if (g + 2 < blocks) product<Ops, (kC + 2) % 4>(xa, b, g + 2);
  Ops::template store<kC>(p + kC % 2 * kSums, 64);
  if (g > 0) take(g - 1, p + (kC + 1) % 2 * kSums);
}

// One token tile's products over `blocks` blocks, each block's 16 x 16 int32 sums handed to
// take(g, sums) in block order.
template <typename Ops, typename Take>
void products(const int8_t* xa, const int8_t* b, int64_t blocks, int32_t* p, Take&& take) {
  product<Ops, 0>(xa, b, 0);
  if (blocks > 1) product<Ops, 1>(xa, b, 1);
  for (int64_t g = 0; g < blocks; ++g) {
    switch (g % 4) {
      case 0: pipelined<Ops, 0>(xa, b, blocks, p, g, take); break;
      case 1: pipelined<Ops, 1>(xa, b, blocks, p, g, take); break;
      case 2: pipelined<Ops, 2>(xa, b, blocks, p, g, take); break;
      default: pipelined<Ops, 3>(xa, b, blocks, p, g, take); break;
    }
  }
  take(blocks - 1, p + (blocks - 1) % 2 * kTokens * kQuantGroup);
}

// y[t * ldy + r] for `rows` rows (a multiple of 16, in groups) of `units` units against
// `tokens` tokens (a multiple of 16), x packed by pack_x. Scratch: b of units x kTileBytes,
// dw of units x 16 floats, p of 512 int32 (64-byte aligned).
template <typename Ops>
void q4_0_rows(const uint8_t* w, int64_t rows, int64_t units, const int8_t* xa, const float* xd, int64_t tokens,
               float* y, int64_t ldy, int8_t* b, float* dw, int32_t* p) {
  const int64_t group_bytes = units * quant_unit_bytes(DType::kQ4_0);
  Ops::configure();
  for (int64_t r0 = 0; r0 < rows; r0 += kQuantGroup) {
    unpack_q4_0(w + r0 / kQuantGroup * group_bytes, units, b, dw);
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokens) {
      const float* xdt = xd + t0 * units;
      typename Ops::Acc acc;
      Ops::clear(acc);
      products<Ops>(xa + t0 / kTokens * pairs_of(units) * kTileBytes, b, units, p, [&](int64_t u, const int32_t* sums) {
        Ops::step(acc, dw + u * kQuantGroup, xdt + u * kTokens, sums);
      });
      Ops::finish(acc, y + t0 * ldy + r0, ldy);
    }
  }
  Ops::release();
}

// Q4_K (quant_dot.h's order, as quant_groups.cpp's KVec): for each row and token, unit
// (super-block of 256) by unit, P = the sum over its 8 sub-blocks j of sc_j times the
// sub-block's exact sum of q x, M = the sum of m_j X_j (X_j the token's sum of sub-block j's
// x), then acc = fma(d_w d_x, float(P), acc) and acc = fma(-(dmin_w d_x), float(M), acc).
// The scale goes into the weights: q (sc_j % 8) and q (sc_j / 8) are at most 105, so each is
// an int8 B tile, and a unit's 8 products into two C tiles give P = C_a + 8 C_b exactly.
inline constexpr int64_t kQ4KTiles = 8;        // B tiles a unit: (a, b) for each pair of sub-blocks
inline constexpr int64_t kQ4KMetaBytes = 256;  // a unit's d, dmin, scales and mins for 16 rows

// ggml's get_scale_min_k4: sub-block j's 6-bit scale and min from a row's 12 bytes q.
static inline void scale_min_k4(const uint8_t* q, int64_t j, int32_t& sc, int32_t& m) {
  if (j < 4) {
    sc = q[j] & 63, m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The B tiles of 16 rows' `units` Q4_K units (out: 8 a unit; pair i's (sub-blocks 2i and 2i
// + 1: elements 64 i..64 i + 63) tile a at (8 u + 2 i) x kTileBytes, rows 0-7 sub-block 2i's
// q (sc_2i % 8) and rows 8-15 sub-block 2i + 1's, tile b after it with sc / 8), and the first
// 4 words (d, dmin, the 12 bytes of scales and mins) as kQuantGroup's layout has them: 4
// slices of 64 bytes, row r's word s at 64 s + 4 r (meta: kQ4KMetaBytes a unit).
// word(r, u, w): the 4-byte word w of row r's unit u (rows past the weight's: zeros).
template <typename Word>
void unpack_q4_k(Word&& word, int64_t units, int8_t* out, uint8_t* meta) {
  constexpr uint32_t kLow = 0x0F0F0F0F;
  for (int64_t u = 0; u < units; ++u) {
    int8_t* tiles = out + kQ4KTiles * u * kTileBytes;
    for (int64_t r = 0; r < kQuantGroup; ++r) {
      uint8_t q[16];
      for (int64_t s = 0; s < 4; ++s) {
        const uint32_t v = word(r, u, s);
        std::memcpy(q + 4 * s, &v, 4);
        std::memcpy(meta + u * kQ4KMetaBytes + 64 * s + 4 * r, &v, 4);
      }
      uint32_t low[8], high[8];  // sc_j % 8 and sc_j / 8
      for (int64_t j = 0; j < 8; ++j) {
        int32_t sc = 0, m = 0;
        scale_min_k4(q + 4, j, sc, m);
        low[j] = static_cast<uint32_t>(sc % 8), high[j] = static_cast<uint32_t>(sc / 8);
      }
      for (int64_t w = 0; w < 32; ++w) {  // w = 8 i + row: elements 4 row..4 row + 3 of sub-blocks 2i, 2i + 1
        const int64_t i = w / 8, row = w % 8;
        const uint32_t v = word(r, u, 4 + w), lo = v & kLow, hi = v >> 4 & kLow;  // each byte times at most 7: no carry
        int8_t* a = tiles + 2 * i * kTileBytes + 4 * r;
        int8_t* b = a + kTileBytes;
        const uint32_t a_lo = lo * low[2 * i], a_hi = hi * low[2 * i + 1], b_lo = lo * high[2 * i],
                       b_hi = hi * high[2 * i + 1];
        std::memcpy(a + 64 * row, &a_lo, 4);
        std::memcpy(a + 64 * (8 + row), &a_hi, 4);
        std::memcpy(b + 64 * row, &b_lo, 4);
        std::memcpy(b + 64 * (8 + row), &b_hi, 4);
      }
    }
  }
}

// Q8_K x (token t's unit u at x[t * units + u]; tokens a multiple of 16) as the A tiles
// take it: token tile i's unit u, pair q (64 elements) at xa + ((i * units + u) * 4 + q) x
// kTileBytes (its 16 tokens' 64 int8, 64 bytes apart); the unit's d at xd + (i * units + u)
// * 16 + t % 16, its X_j in pairs (X_2q, X_2q+1 as int16 in an int32) at xm + ((i * units +
// u) * 16 + t % 16) * 4 + q.
static inline void pack_x_k(const Q8KBlock* x, int64_t tokens, int64_t units, int8_t* xa, float* xd, int32_t* xm) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t u = 0; u < units; ++u) {
      const Q8KBlock& b = x[t * units + u];
      const int64_t at = (t / kTokens * units + u) * kTokens + t % kTokens;
      for (int64_t q = 0; q < 4; ++q) {
        std::memcpy(xa + ((t / kTokens * units + u) * 4 + q) * kTileBytes + t % kTokens * 64, b.qs + 64 * q, 64);
        const auto even = static_cast<uint16_t>(b.bsums[4 * q] + b.bsums[4 * q + 1]),
                   odd = static_cast<uint16_t>(b.bsums[4 * q + 2] + b.bsums[4 * q + 3]);
        xm[at * 4 + q] = static_cast<int32_t>(uint32_t{even} | uint32_t{odd} << 16);
      }
      xd[at] = b.d;
    }
}

// Pair i of unit u: its A tile (4 + i % 2) against tiles a and b (6, 7) into C tiles kC and
// kC + 1.
template <typename Ops, int kC, int kI>
void k_pair(const int8_t* xa, const int8_t* b, int64_t u) {
  constexpr int kA = 4 + kI % 2;
  Ops::template load<kA>(xa + (4 * u + kI) * kTileBytes, 64);
  Ops::template load<6>(b + (kQ4KTiles * u + 2 * kI) * kTileBytes, 64);
  Ops::template dot<kC, kA, 6>();
  Ops::template load<7>(b + (kQ4KTiles * u + 2 * kI + 1) * kTileBytes, 64);
  Ops::template dot<kC + 1, kA, 7>();
}
// Unit u's 8 products into C tiles kC (a) and kC + 1 (b).
template <typename Ops, int kC>
void k_products(const int8_t* xa, const int8_t* b, int64_t u) {
  Ops::template zero<kC>();
  Ops::template zero<kC + 1>();
  k_pair<Ops, kC, 0>(xa, b, u);
  k_pair<Ops, kC, 1>(xa, b, u);
  k_pair<Ops, kC, 2>(xa, b, u);
  k_pair<Ops, kC, 3>(xa, b, u);
}

// y[t * ldy + r] for `rows` Q4_K rows (any number: the last group's missing rows are zeros,
// left out of y) of `units` units against `tokens` tokens (a multiple of 16), x packed by
// pack_x_k; word(r, u, w): the 4-byte word w of row r's unit u. A unit's products run while
// the vectors take the unit before. Scratch: b of 8 x units x kTileBytes, meta of units x
// kQ4KMetaBytes, p of 512 int32, acc of 256 floats (64-byte aligned). Ops (besides the
// tiles): k_unit(acc, pa, pb, meta, dx, xm) (P = pa + 8 pb, M, the unit's two f32 steps into
// acc: 16 tokens x 16 rows in memory) and k_finish(acc, y, ldy, n) (n rows).
template <typename Ops, typename Word>
void q4_k_rows(Word&& word, int64_t rows, int64_t units, const int8_t* xa, const float* xd, const int32_t* xm,
               int64_t tokens, float* y, int64_t ldy, int8_t* b, uint8_t* meta, int32_t* p, float* acc) {
  constexpr int64_t kSums = kTokens * kQuantGroup;
  Ops::configure();
  for (int64_t r0 = 0; r0 < rows; r0 += kQuantGroup) {
    const int64_t n = std::min(kQuantGroup, rows - r0);
    unpack_q4_k([&](int64_t r, int64_t u, int64_t w) -> uint32_t { return r < n ? word(r0 + r, u, w) : 0; }, units, b,
                meta);
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokens) {
      const int64_t first = t0 / kTokens * units;  // the token tile's first unit in xa, xd, xm
      const int8_t* xat = xa + first * 4 * kTileBytes;
      std::fill(acc, acc + kSums, 0.0f);
      k_products<Ops, 0>(xat, b, 0);
      for (int64_t u = 0; u < units; ++u) {
        if (u % 2 == 0) {
          if (u + 1 < units) k_products<Ops, 2>(xat, b, u + 1);
          Ops::template store<0>(p, 64);
          Ops::template store<1>(p + kSums, 64);
        } else {
          if (u + 1 < units) k_products<Ops, 0>(xat, b, u + 1);
          Ops::template store<2>(p, 64);
          Ops::template store<3>(p + kSums, 64);
        }
        Ops::k_unit(acc, p, p + kSums, meta + u * kQ4KMetaBytes, xd + (first + u) * kTokens,
                    xm + (first + u) * kTokens * 4);
      }
      Ops::k_finish(acc, y + t0 * ldy + r0, ldy, n);
    }
  }
  Ops::release();
}

}  // namespace tessera::cpu::amx::int8

#endif  // TESSERA_BACKEND_CPU_AMX_INT8_KERNEL_H_
