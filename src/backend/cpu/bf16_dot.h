// Matmul of bf16 weights by AVX-512 BF16 dot products (vdpbf16ps), for matmul.cpp, which
// sends every bf16-weight matmul here when its dispatched target is AVX-512 and this CPU
// has the instruction (Highway 1.0.3 has no target for it), unless the CPU also has AMX
// (amx.h). Two orders, one a process: the column order (columns_kernel.h), taken
// by default, and the row order (bf16_dot_kernel.h). Each header states its order and why
// decode and prefill both take it; the interface is bf16_matmul.h's.
// Pure functions over caller-owned memory; thread-safe.
#pragma once

#include <cstdint>

#include "backend/cpu/bf16_matmul.h"

namespace tessera::cpu::bf16_dot {

// The dot products where this CPU has AVX-512 F, BW, VL, DQ and BF16 (the instructions
// bf16_dot.cpp is compiled for); else nullptr.
const bf16::Matmul* instructions();

// The same instruction in the column order (columns_kernel.h: each output one lane,
// summed along k; weights in weight_layout.h's kColumns layout, or copied into it as
// they are read), where this CPU has it; else nullptr.
const bf16::Matmul* columns();

// Whether matmul.cpp is to take these dot products: instructions() is there and the
// environment variable TESSERA_BF16_DOT is not "0" (a switch for measuring what they buy
// against the widening f32 path on the same CPU, as TESSERA_SPIN_US is for the thread
// pool's spin). Read once; the order of a process's sums never changes while it runs.
bool enabled();
// Whether it is to take them in the column order (unless AMX takes bf16 weights: amx.h):
// enabled() and TESSERA_BF16_COLUMNS is not "0" (then the row order of
// bf16_dot_kernel.h, for measuring one against the other on the same CPU). Read once.
bool columns_enabled();

// n floats rounded to bf16 by the instruction set's conversion (vcvtneps2bf16: nearest
// even, a subnormal to zero): how both kernels round x. Only where instructions() is there.
void round_x(const float* x, int64_t n, uint16_t* out);

// Register-only dot products on one thread (dot_loop_flops(n) floating-point operations:
// two per bf16 product), the peak the bf16 GEMM is measured against. Only where
// instructions() is there.
float dot_loop(int64_t iterations);
int64_t dot_loop_flops(int64_t iterations);

}  // namespace tessera::cpu::bf16_dot
