// What the instruction kernels for bf16 weights share: AVX-512 BF16 dot products
// (bf16_dot.h) and AMX tile products (amx.h). matmul.cpp sends every bf16-weight matmul to
// one of them where the CPU has it, through the one interface below, so that a call site
// says once which kernel a process takes. Both round x to bf16 with the same instruction
// (vcvtneps2bf16) and pad k with zeros to whole chunks of kChunk elements (round_row); each
// kernel's header states the order of its sums.
// Pure functions over caller-owned memory; thread-safe.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/weight_layout.h"

namespace tessera::cpu::bf16 {

// The contracts are kernels.h's matmul_rows and its packed functions, for bf16 weights (w:
// their bits, in either layout of weight_layout.h). packed_floats: floats (of 4 bytes: the
// packed x is bf16, two to a float) of a call's packed x, 0 when the call packs none (then
// use matmul_rows). split_tokens, split_rows and most_tokens: kernels.h's matmul_split,
// whatever k.
struct Matmul {
  void (*matmul_rows)(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, int64_t ldy,
                      int64_t group) = nullptr;
  int64_t (*packed_floats)(int64_t tokens, int64_t k) = nullptr;
  void (*pack_x)(const float* x, int64_t tokens, int64_t k, int64_t begin, int64_t end, float* packed) = nullptr;
  void (*matmul_rows_packed)(const float* packed, int64_t tokens, int64_t begin, int64_t end, int64_t k,
                             const uint16_t* w, int64_t rows, float* y, int64_t ldy, int64_t group) = nullptr;
  int64_t (*row_group)() = nullptr;  // kernels.h's matmul_row_group
  int64_t split_tokens = 0;
  int64_t split_rows = 0;
  int64_t most_tokens = 0;
};

// Whether the environment variable `name`, a switch that turns one kernel off so that one
// binary measures it against the next on the same CPU, is unset or anything but "0".
inline bool switched_on(const char* name) {
  const char* text = std::getenv(name);
  return text == nullptr || std::strcmp(text, "0") != 0;
}

// bf16 elements of k in one dot product (vdpbf16ps) or one row of an A tile (tdpbf16ps).
inline constexpr int64_t kChunk = 32;
static_assert(kChunk == kLineElements<uint16_t>, "a chunk is one 64-byte line of weight_layout.h");

inline int64_t padded_k(int64_t k) { return (k + kChunk - 1) / kChunk * kChunk; }

// Where the packed x of tokens [begin, ...) starts, in floats, in either kernel's layout:
// whole blocks of tokens (begin a multiple of the kernel's split_tokens), each token
// padded_k(k) bf16 elements (kChunk is even, so whole floats).
inline int64_t packed_offset(int64_t begin, int64_t k) { return begin * padded_k(k) / 2; }

// x of one token rounded to bf16 by Ops::round_x (the kernel's instruction, or the tests'
// emulation of it), zeros in [k, padded_k(k)).
template <typename Ops>
void round_row(const float* x, int64_t k, uint16_t* out) {
  Ops::round_x(x, k, out);
  for (int64_t i = k; i < padded_k(k); ++i) out[i] = 0;
}

}  // namespace tessera::cpu::bf16
