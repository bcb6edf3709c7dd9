// Matmul of bf16 weights by AMX tile products (tdpbf16ps), for matmul.cpp, which sends
// every bf16-weight matmul here, decode and prefill alike, when it would take AVX-512
// BF16 dot products (bf16_dot.h) and this CPU has AMX-BF16 and the OS lets the process
// use the tiles. The order of the sums is stated in amx_kernel.h. The contracts are
// kernels.h's matmul_rows and its packed trio, for bf16 weights (w: their bits).
// Pure functions over caller-owned memory; thread-safe (the tiles are each thread's own,
// configured at the start of every call and released at its end).
#pragma once

#include <cstdint>

namespace tessera::cpu::amx {

// Whether this CPU has AMX-TILE, AMX-BF16 and AVX-512 BF16, and Linux granted the process
// the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once). The functions below
// must be called only when it does.
bool cpu_has_instruction();

// Whether matmul.cpp is to take the tiles: the CPU has them, bf16_dot::enabled() (so
// TESSERA_BF16_DOT=0 turns both off), and TESSERA_AMX is not "0" (then bf16 weights take
// the AVX-512 BF16 dot products: a switch for measuring one against the other on the
// same CPU). Read once.
bool enabled();

void matmul_rows(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, int64_t ldy);

// Floats (of 4 bytes: a bf16 pair each) that a call's packed x takes; 0 for one token
// (decode reads x as it is rounded, nothing packed).
int64_t packed_floats(int64_t tokens, int64_t k);
void pack_x(const float* x, int64_t tokens, int64_t k, int64_t begin, int64_t end, float* packed);
void matmul_rows_packed(const float* packed, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y,
                        int64_t ldy);

// Register-only tile products on one thread (dot_loop_flops(n) floating-point operations:
// two per bf16 product), the peak the AMX GEMM is measured against.
float dot_loop(int64_t iterations);
int64_t dot_loop_flops(int64_t iterations);

}  // namespace tessera::cpu::amx
