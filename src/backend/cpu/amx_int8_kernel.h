// Q8_0 and Q4_0 weights in kQuantGroup's layout (weight_layout.h) against Q8_0 activations by
// AMX-INT8 tile products (tdpbssd), written once over an `Ops` type that supplies the tiles, the
// instruction and the f32 step:
//   - amx.cpp instantiates it with the instructions themselves;
//   - the tests instantiate it with a portable emulation (amx_emulated.h).
// Every standard header it uses, quant_act.h and weight_layout.h must be included before it.
//
// The order is quant_dot.h's, the one quant_groups.cpp's kernels take: for each row and
// token, unit (block of 32) by unit, acc = fma(d_w * d_x, float(P), acc), P the unit's exact
// integer sum of q x (Q8_0) or (q - 8) x (Q4_0). A tile product makes P for 16 tokens x 16
// rows at once, and integer sums are exact in any order, so every output is bitwise the
// vector kernels' (and a token's row the same in any batch, alone or among others).
//
// Tiles: C = tile 0 to 3 (16 tokens x 16 rows of int32), A = tile 4 or 5 (16 tokens x 64
// int8: a pair of units' x, packed by pack_x), B = tile 6 or 7 (16 rows of 64 bytes: row p
// the 16 weight rows' q (Q8_0) or q - 8 (Q4_0) at elements 4p..4p + 3 of the pair, the VNNI
// layout tdpbssd takes, the other unit's 8 rows zero). Every tile is whole (64-byte rows, 16
// of them): the products of a unit alone (32 int8 of k, B of 8 rows) were 4 times slower
// beside the tile loads on the Xeons measured (docs/benchmarks.md, session 46), so each
// product takes a pair of units' x and one unit's weights, and half of its products are by
// zero.
// Unit u's product takes C u % 4, A (u / 2) % 2 and B u % 2 and runs two units ahead of its
// f32 step; its C tile goes to memory a unit before the vectors read it. A group's unit (an
// f16 d a row, then slices of 64 bytes, slice j 4 bytes of every row) becomes its B rows with
// no transposition: Q8_0's 8 slices (elements 4j..4j + 3) as they are, Q4_0's 4 slices of
// nibbles as rows j (the low nibbles, elements 4j..4j + 3) and 4 + j (the high ones, 16 + 4j..).
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

// The B tiles of a group's `units` units of kT (out: kTileBytes each, unit u's rows at 8 (u %
// 2), the others zero) and the rows' d as f32 (dw: 16 a unit).
template <DType kT>
void unpack(const uint8_t* group, int64_t units, int8_t* out, float* dw) {
  constexpr int64_t kUnitBytes = quant_unit_bytes(kT);
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
    if constexpr (kT == DType::kQ8_0) {
      std::memcpy(b, unit + 2 * kQuantGroup, kTileBytes / 2);
      continue;
    }
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

// Unit u's product into C tile kC (u % 4), from A tile 4 + kC / 2 (loaded by the pair's
// first unit) and B tile 6 + kC % 2.
template <typename Ops, int kC>
void product(const int8_t* xa, const int8_t* b, int64_t u) {
  constexpr int kA = 4 + kC / 2, kB = 6 + kC % 2;
  if constexpr (kC % 2 == 0) Ops::template load<kA>(xa + u / 2 * kTileBytes, 64);
  Ops::template zero<kC>();
  Ops::template load<kB>(b + u * kTileBytes, 64);
  Ops::template dot<kC, kA, kB>();
}

// Step u of a token tile (kC = u % 4): unit u + 2's product, unit u's sums out to p (half
// u % 2), then unit u - 1's f32 step from the other half.
template <typename Ops, int kC>
void pipelined(typename Ops::Acc& acc, const int8_t* xa, const float* xd, int64_t units, const int8_t* b,
               const float* dw, int32_t* p, int64_t u) {
  constexpr int64_t kSums = kTokens * kQuantGroup;
  if (u + 2 < units) product<Ops, (kC + 2) % 4>(xa, b, u + 2);
  Ops::template store<kC>(p + kC % 2 * kSums, 64);
  if (u > 0) Ops::step(acc, dw + (u - 1) * kQuantGroup, xd + (u - 1) * kTokens, p + (kC + 1) % 2 * kSums);
}

// y[t * ldy + r] for `rows` rows of kT (Q8_0 or Q4_0; a multiple of 16, in groups) of `units`
// units against `tokens` tokens (a multiple of 16), x packed by pack_x. Scratch: b of units x
// kTileBytes, dw of units x 16 floats, p of 512 int32 (64-byte aligned).
template <typename Ops, DType kT>
void rows_of(const uint8_t* w, int64_t rows, int64_t units, const int8_t* xa, const float* xd, int64_t tokens, float* y,
             int64_t ldy, int8_t* b, float* dw, int32_t* p) {
  static_assert(block32(kT));
  const int64_t group_bytes = units * quant_unit_bytes(kT);
  Ops::configure();
  for (int64_t r0 = 0; r0 < rows; r0 += kQuantGroup) {
    unpack<kT>(w + r0 / kQuantGroup * group_bytes, units, b, dw);
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokens) {
      const int8_t* xat = xa + t0 / kTokens * pairs_of(units) * kTileBytes;
      const float* xdt = xd + t0 * units;
      typename Ops::Acc acc;
      Ops::clear(acc);
      product<Ops, 0>(xat, b, 0);
      if (units > 1) product<Ops, 1>(xat, b, 1);
      for (int64_t u = 0; u < units; ++u) {
        switch (u % 4) {
          case 0: pipelined<Ops, 0>(acc, xat, xdt, units, b, dw, p, u); break;
          case 1: pipelined<Ops, 1>(acc, xat, xdt, units, b, dw, p, u); break;
          case 2: pipelined<Ops, 2>(acc, xat, xdt, units, b, dw, p, u); break;
          default: pipelined<Ops, 3>(acc, xat, xdt, units, b, dw, p, u); break;
        }
      }
      const int64_t last = units - 1;
      Ops::step(acc, dw + last * kQuantGroup, xdt + last * kTokens, p + last % 2 * kTokens * kQuantGroup);
      Ops::finish(acc, y + t0 * ldy + r0, ldy);
    }
  }
  Ops::release();
}

}  // namespace tessera::cpu::amx::int8

#endif  // TESSERA_BACKEND_CPU_AMX_INT8_KERNEL_H_
