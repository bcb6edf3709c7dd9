// Matmul of bf16 weights by AVX-512 BF16 dot products (vdpbf16ps), for matmul.cpp, which
// sends every bf16-weight matmul here when its dispatched target is AVX-512 and this CPU
// has the instruction (Highway 1.0.3 has no target for it). The order of the sums, and
// why decode and prefill both take it, is stated in bf16_dot_kernel.h. The contracts are
// kernels.h's matmul_rows and its packed trio, for bf16 weights (w: their bits).
// Pure functions over caller-owned memory; thread-safe.
#pragma once

#include <cstdint>

namespace tessera::cpu::bf16_dot {

// Whether this CPU has AVX-512 F, BW, VL and BF16 (the instructions bf16_dot.cpp is
// compiled for). The functions below must be called only when it does.
bool cpu_has_instruction();

// Whether matmul.cpp is to take these dot products: the CPU has them and the environment
// variable TESSERA_BF16_DOT is not "0" (a switch for measuring what they buy against the
// widening f32 path on the same CPU, as TESSERA_SPIN_US is for the thread pool's spin).
// Read once; the order of a process's sums never changes while it runs.
bool enabled();

void matmul_rows(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, int64_t ldy);

// Floats (of 4 bytes: the packed x is bf16, two to a float) that a call's packed x takes;
// 0 when the call is small enough to need none (then use matmul_rows).
int64_t packed_floats(int64_t tokens, int64_t k);
void pack_x(const float* x, int64_t tokens, int64_t k, int64_t begin, int64_t end, float* packed);
void matmul_rows_packed(const float* packed, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y,
                        int64_t ldy);

// n floats rounded to bf16 by the instruction set's conversion (vcvtneps2bf16: nearest
// even, a subnormal to zero), as this file rounds x; amx.cpp rounds its x with it too.
void round_x(const float* x, int64_t n, uint16_t* out);

// Register-only dot products on one thread (bf16_dot_loop_flops(n) floating-point
// operations: two per bf16 product), the peak the bf16 GEMM is measured against.
float dot_loop(int64_t iterations);
int64_t dot_loop_flops(int64_t iterations);

}  // namespace tessera::cpu::bf16_dot
