// The integer dot products of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K rows (quant_dot.h's order of
// one f32 accumulator a row), 16 rows a vector: quant_dot_rows's kernels for Q8_0 and Q4_0,
// and for the K types from 16 or 32 tokens on, with run-time ISA dispatch (Highway;
// quant_groups.cpp).
//
// Pure function over caller-owned memory; any thread.
#pragma once

#include <cstdint>

#include "backend/cpu/amx.h"
#include "core/dtype.h"

namespace tessera::cpu {

// As quant_dot_rows for a dtype that takes_quant_groups (weight_layout.h): rows in
// kQuantGroup's layout where `grouped` (rows a multiple of 16), else plain rows, copied into
// that layout a group at a time.
void quant_group_rows(DType dtype, const void* w, int64_t rows, int64_t k, const void* xq, int64_t tokens, float* y,
                      int64_t ldy, bool grouped, const amx::PackedX* packed = nullptr);

// Rows a one-token call of placed `dtype` rows reads side by side on the target dispatch
// chose (its kernels' streams, kQuantGroup rows each; kQuantGroup for a dtype without
// them): the unit quant_matmul.cpp deals a decode's rows to threads in, so that a chunk
// does not end in groups read one stream at a time (Q8_0 and Q4_0 +3-8 % on AVX-512 VNNI;
// docs/benchmarks.md, session 59).
int64_t quant_decode_rows(DType dtype);

// Whether placed Q8_0 and Q4_0 from 16 tokens on take AMX-INT8 tile products (amx.h: the same bits)
// on the target dispatch chose: its VNNI target, a CPU with AMX-INT8, TESSERA_AMX not "0".
bool quant_tiles_active();

}  // namespace tessera::cpu
