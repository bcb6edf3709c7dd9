// Matmul of f16 weights in column order (columns_kernel.h: each output one f32 lane, summed
// along k by FMAs on the weights widened exactly by F16C), for matmul.cpp, which sends every
// f16-weight matmul here when its dispatched target is AVX-512 or AVX2 (two kernels, the
// same order and bits), unless TESSERA_F16_COLUMNS is "0" (then matmul.cpp's own order,
// for measuring one against the other on the same CPU). The interface is bf16_matmul.h's,
// whose functions take any 16-bit weights.
// Pure functions over caller-owned memory; thread-safe.
#pragma once

#include "backend/cpu/bf16_matmul.h"

namespace tessera::cpu::f16_columns {

// The kernel where this CPU has AVX-512 F, VL, DQ and BW (and F16C, which comes with
// them); else nullptr.
const bf16::Matmul* instructions();

// The kernel on AVX2 registers where this CPU has AVX2, FMA and F16C; else nullptr.
const bf16::Matmul* avx2_instructions();

// Whether matmul.cpp is to take the kernel of its target where the CPU has it:
// TESSERA_F16_COLUMNS is not "0". Read once.
bool enabled();

}  // namespace tessera::cpu::f16_columns
