// Matmul of bf16 weights in column order on AVX2 (columns_kernel.h's "bf16 widened": each
// output one f32 lane, summed along k element by element by FMAs on the weights widened
// exactly, x as it is), for matmul.cpp, which sends every bf16-weight matmul here when its
// dispatched target is AVX2 (an AVX2 CPU has no bf16 dot product), unless
// TESSERA_BF16_COLUMNS is "0" (then matmul.cpp's own order, for measuring one against the
// other on the same CPU). A block of a column is widened to f32 once for every token of
// the call, then summed in tiles of one column x 6 tokens. The interface is
// bf16_matmul.h's. Pure functions over caller-owned memory; thread-safe.
#pragma once

#include "backend/cpu/bf16_matmul.h"

namespace tessera::cpu::bf16_columns_avx2 {

// The kernel where this CPU has AVX2 and FMA; else nullptr.
const bf16::Matmul* instructions();

// Whether matmul.cpp is to take it on an AVX2 target: TESSERA_BF16_COLUMNS is not "0".
// Read once.
bool enabled();

}  // namespace tessera::cpu::bf16_columns_avx2
