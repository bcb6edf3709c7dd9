// CPU kernels with run-time ISA dispatch (Highway: AVX2, AVX-512, NEON, ...; the
// binary is built for the baseline ISA and picks the best target at first call).
// Pure functions over caller-owned memory; thread-safe. Accumulation is f32.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::cpu {

// y[t * ldy + n] = sum_k x[t * k + kk] * w[n * k + kk], for t < tokens, n < rows.
// x: f32 [tokens, k]; w: `rows` rows of length k in f32, bf16 or f16, one after another
// (group 1) or in groups of `group` rows as weight_layout.h lays them out (a group of 4, 8
// or 16, that can_interleave allows). Each output is summed in one fixed order whatever
// `tokens` or the layout is (matmul.cpp states it), so a token's row is bitwise the same
// alone or in a call of any size.
void matmul_rows(const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t rows, float* y,
                 int64_t ldy, int64_t group = 1);
// The group of rows (weight_layout.h) that weights of w_dtype are best laid out in: the
// rows of a one-token decode tile of the kernel they take (decode_tile_rows(), at most 8
// on AVX2's own paths), kColumns for the column order (columns_kernel.h), or 1, as
// mapped: for AMX tiles (no faster interleaved on the Xeon), and for every kernel when
// the environment variable TESSERA_INTERLEAVE is "0" (read once: for measuring one layout
// against the other in one binary).
int64_t matmul_row_group(DType w_dtype);

// Whether bf16-weight matmuls take AVX-512 BF16 dot products on the target dispatch
// chose (an AVX-512 target on a CPU that has them): x is then rounded to bf16 and the
// sums follow columns_kernel.h's order (or bf16_dot_kernel.h's, or amx_kernel.h's: see
// matmul.cpp) instead of matmul.cpp's, in every path.
bool bf16_dot_active();
// Whether they take AMX tile products (amx.h) instead: bf16_dot_active() and the CPU has
// AMX-BF16. x is still rounded to bf16; the sums follow amx_kernel.h's order.
bool amx_active();
// Whether matmuls of w_dtype weights take columns_kernel.h's column order on the target
// dispatch chose, instead of matmul.cpp's: f16 on an AVX-512 or AVX2 target (unless
// TESSERA_F16_COLUMNS=0); bf16 on an AVX2 target, or where bf16_dot_active() without AMX
// (unless TESSERA_BF16_COLUMNS=0).
bool columns_active(DType w_dtype);

// Bytes that a call asks the caches for while it reads its own rows (a hint: the same
// bits): after reading part of its rows, that part of these bytes, a line at a time.
// Attention's next block of keys or values, a jump the hardware's prefetchers do not
// follow, asked for in step with the work on this block rather than all at once before
// it: a burst of a block's 64 requests stalled a core on its queue of misses
// (docs/benchmarks.md, session 57).
struct Ahead {
  const void* at = nullptr;
  size_t bytes = 0;
};
// Asks for ahead's lines from `asked` (bytes, updated) up to done / total of its bytes.
inline void ask_ahead(const Ahead& ahead, size_t& asked, int64_t done, int64_t total) {
  const size_t to = ahead.bytes * static_cast<size_t>(done) / static_cast<size_t>(total);
  for (; asked < to; asked += 64) __builtin_prefetch(static_cast<const char*>(ahead.at) + asked);
}

// matmul_rows for a few tokens (tiles only, never the GEMM), weights widened exactly to
// f32, in matmul.cpp's order whatever bf16_dot_active() says (attention's scores over a
// bf16 KV cache keep the queries in f32); `ahead` asked for as the rows are read.
void dot_rows(const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t rows, float* y,
              int64_t ldy, const Ahead& ahead = {});
// Tokens whose sums dot_rows takes together on the target dispatch chose, each row read
// once for all of them: 4 on AVX-512 (attention: a KV head's query heads on the Llama-3
// shapes), 1 elsewhere (AVX2's 16 registers ran slower in tiles of 2 rows x 4 tokens than a
// token at a time); more tokens read the rows again for each such group.
int64_t dot_rows_at_once();

// The same matmul in two steps, so that the threads splitting one call share one
// packed copy of x instead of each packing all of it, and may split its tokens as well as
// its rows. matmul_packed_floats: the floats the packed x of a call takes, 0 when the
// call is small enough to need none (then use matmul_rows). matmul_pack_x packs tokens
// [begin, end), so disjoint ranges of one call may be packed by different threads.
// matmul_split: where a call may be cut: its tokens at multiples of `tokens` (whole
// blocks of the packed layout), its rows at multiples of `rows` (the least a thread should
// take: each piece reads all of its tokens' packed x once for its rows), and at most
// `most_tokens` tokens a piece where the kernel's caches want its x's blocks no larger (0:
// any number).
// matmul_rows_packed then computes `rows` rows of tokens [begin, end) from the packed x
// (x itself is still read, for the sums' tails) into y[t * ldy + r], t in [begin, end)
// (y, like x, is the whole call's): begin a multiple of the split's tokens, end one too
// or `tokens`. An output's bits do not depend on the range or the rows it was computed
// among. packed: 64-byte aligned. All four must run on the same instruction set, which
// dispatch keeps unless a test changes it.
struct MatmulSplit {
  int64_t tokens = 0;
  int64_t rows = 0;
  int64_t most_tokens = 0;
};
int64_t matmul_packed_floats(int64_t tokens, int64_t k, DType w_dtype);
void matmul_pack_x(const float* x, int64_t tokens, int64_t k, DType w_dtype, int64_t begin, int64_t end, float* packed);
MatmulSplit matmul_split(int64_t k, DType w_dtype);
void matmul_rows_packed(const float* packed, const float* x, int64_t tokens, int64_t begin, int64_t end, int64_t k,
                        const void* w, DType w_dtype, int64_t rows, float* y, int64_t ldy, int64_t group = 1);

float dot(const float* a, const float* b, int64_t n);
// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);
// y += a * x, x in f32, bf16 or f16.
void axpy(float a, const void* x, DType x_dtype, float* y, int64_t n);
// y_j += a_j[r] * x[r * ldx, r * ldx + n) for r = 0 .. rows - 1 and j = 0 .. m - 1 (a_j = a
// + j * lda, y_j = y + j * ldy), in that order of r for every element: the same bits as
// `rows` calls of axpy a row of y, in one call (attention's values, for the query heads of a
// KV head at once: each row of x loaded once for all of them), and each element's bits
// whatever columns a call takes; `ahead` asked for as the rows of x are read.
void axpy_rows(const float* a, int64_t lda, int64_t m, const void* x, DType x_dtype, int64_t ldx, int64_t rows,
               float* y, int64_t ldy, int64_t n, const Ahead& ahead = {});
// dst[i] = float(src[i]) for a f32, bf16 or f16 source.
void to_f32(const void* src, DType dtype, int64_t n, float* dst);
// dst[i] = src[i] rounded to nearest even in f32, bf16 or f16.
void from_f32(const float* src, int64_t n, DType dtype, void* dst);
// Bytes past a one-token decode tile's own (matmul.cpp's and bf16_dot's) that it asks for
// as it reads, in memory order: TESSERA_DECODE_PREFETCH, read once, 0 none (for measuring
// one against the other); unset, the kernel's `preferred`. A hint: the same bits.
int64_t decode_prefetch_bytes(int64_t preferred = 2048);
// Weight rows side by side in a one-token decode tile: TESSERA_DECODE_ROWS, 4, 8 or 16,
// read once; 8 unset or anything else (matmul.cpp's AVX2 targets take at most 8, for
// their 16 registers). Each row's sum is the same whatever the tile, so the same bits.
int decode_tile_rows();
// The index of the first largest of x[0, n): std::max_element's answer (0 for n = 0),
// read in vectors where x holds no NaN or infinity.
int64_t argmax(const float* x, int64_t n);
// x[i] = exp(scale x[i] - max) / sum over the row (attention's softmax), vectorized:
// within a few ULP of the scalar loop, in one order for every n.
void softmax_scaled(float* x, int64_t n, float scale);
// out[i] = silu(gate[i]) * up[i], vectorized; each element's bits depend on its inputs
// alone (out may be gate or up).
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
// How read_sum walks its words. kRows: blocks of `streams` (4, 8 or 16) rows of 4 KiB,
// the rows of a block side by side, as a 16-bit decode tile reads weight rows. kParts:
// `streams` (1, 2 or 4) contiguous parts at once, each one long sequential stream, as
// the quantized decode reads its rows.
enum class ReadLayout { kRows, kParts };
// Sum of n u64 words, read as `layout` says; used to measure memory read bandwidth.
uint64_t read_sum(const uint64_t* data, int64_t n, int streams, ReadLayout layout = ReadLayout::kRows);

// fma_loop_flops(n) floating-point operations of fused multiply-adds on registers
// only (no memory), in the widest f32 vectors of the chosen target: the peak the
// matmul is measured against. Returns a value that depends on every operation.
float fma_loop(int64_t iterations);
int64_t fma_loop_flops(int64_t iterations);

// Name of the instruction set chosen at run time ("AVX2", "AVX3", ...).
const char* isa_name();

// With the environment variable TESSERA_ISA=avx2, dispatch takes no AVX-512 target from
// then on (Highway's DisableTargets), so that an AVX-512 machine measures the AVX2 paths
// that the dev machines' kind runs. Read once; CpuDevice calls it before its first kernel.
void cap_isa_from_env();

}  // namespace tessera::cpu
