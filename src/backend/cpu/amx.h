// Matmul of bf16 weights by AMX tile products (tdpbf16ps), for matmul.cpp, which sends
// every bf16-weight matmul here, decode and prefill alike, when it would take AVX-512
// BF16 dot products (bf16_dot.h) and this CPU has AMX-BF16 and the OS lets the process
// use the tiles. The order of the sums is stated in amx_kernel.h; the interface is
// bf16_matmul.h's. Calls of up to 8 tokens over weights in the column layout take vector
// steps in that order instead (amx_columns.h: the same bits, faster from memory). Also
// placed Q8_0 and Q4_0 by AMX-INT8 tile products (tdpbssd, amx_int8_kernel.h), for
// quant_groups.cpp from 16 tokens on; and attention over a bf16 KV cache by tdpbf16ps
// (amx_attention.h), for CpuDevice::attention.
// Pure functions over caller-owned memory; thread-safe (the tiles are each thread's own,
// configured at the start of every call and released at its end).
#pragma once

#include <cstdint>

#include "backend/cpu/attention_step.h"
#include "backend/cpu/bf16_matmul.h"

namespace tessera::cpu::amx {

// The tile products where this CPU has AMX-TILE, AMX-BF16 and AVX-512 BF16 and Linux
// granted the process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once);
// else nullptr.
const bf16::Matmul* instructions();

// Whether matmul.cpp is to take the tiles: instructions() is there, bf16_dot::enabled()
// (so TESSERA_BF16_DOT=0 turns both off), and TESSERA_AMX is not "0" (then bf16 weights
// take the AVX-512 BF16 dot products: a switch for measuring one against the other on the
// same CPU). Read once.
bool enabled();

// Q8_0 and Q4_0 rows by AMX-INT8 tile products (amx_int8_kernel.h: bitwise quant_groups.cpp's
// kernels): int8_runs() where this CPU has AMX-TILE, AMX-INT8 and AVX-512F and Linux granted
// the tiles; int8_enabled() when it runs and TESSERA_AMX is not "0" (read once).
// block32_rows: y[t * ldy + r] for `rows` weight rows of `dtype` (Q8_0 or Q4_0) in
// kQuantGroup's layout (a multiple of 16) of `units` blocks against `tokens` (a multiple of
// 16) tokens' Q8_0 blocks xq (token t's block u at t * units + u). Only where int8_runs().
// packed: the tokens' x as the tiles take them, made once a call by pack_x8 for every
// thread's calls and weights (else each call packs its own).
struct PackedX {
  const int8_t* xa = nullptr;
  const float* xd = nullptr;
};
bool int8_runs();
bool int8_enabled();
void block32_rows(DType dtype, const uint8_t* w, int64_t rows, int64_t units, const void* xq, int64_t tokens, float* y,
                  int64_t ldy, const PackedX* packed = nullptr);
// `tokens` (a multiple of 16) tokens' Q8_0 blocks of `units` blocks packed for block32_rows,
// in buffers of the calling thread (valid until its next call). Only where int8_runs().
PackedX pack_x8(const void* xq, int64_t tokens, int64_t units);

// One unit of CpuDevice::attention over a bf16 KV cache, for attend: `tokens` consecutive
// tokens of one sequence from position pos0 (up to 8) times `heads` query heads of one KV
// head's group, at most 32 query rows. Keys are read only at positions the unit's tokens
// see, values at every position of the chunks of 32 they see (amx_attention.h states the sums).
inline constexpr int64_t kAttentionRows = 32;   // query rows of a unit, at most
inline constexpr int64_t kAttentionChunk = 32;  // positions of an output chunk
struct AttentionUnit {
  const float* q = nullptr;  // F32: token pos0's first head; a token's rows token_stride apart, heads head_dim apart
  float* out = nullptr;      // F32: likewise
  int64_t token_stride = 0;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;  // a multiple of 32
  int64_t pos0 = 0;
  int64_t sliding_window = 0;  // 0: full causal; else a token sees its last `sliding_window` positions
  float scale = 1.0f;
  int64_t block_size = 0;  // a multiple of 32
  // BF16: keys[b], the KV head's keys of the block that holds positions [b * block_size,
  // (b + 1) * block_size) in store_key's layout (read only for blocks the unit sees).
  const uint16_t* const* keys = nullptr;
  // BF16: values[b], the KV head's values of that block in store_value's layout (likewise),
  // whose positions up to values_to (the unit's last or later) are written; those past it
  // are read as zeros, whatever the cache holds there.
  const uint16_t* const* values = nullptr;
  int64_t values_to = 0;
};

// Whether CpuDevice::attention is to take attend for a bf16 cache with this head_dim and
// block_size (and CpuDevice::kv_store to write its keys and values in store_key's and
// store_value's layouts): the
// tiles are there, enabled(), TESSERA_AMX_ATTENTION is not "0" (read once), head_dim a
// multiple of 32 and block_size of 32.
bool attention_enabled(int64_t head_dim, int64_t block_size);
// The unit's outputs by tile products (amx_attention.h). Only where attention_enabled().
void attend(const AttentionUnit& unit);
// attend in three steps that several threads share (a lone token's few units on many
// threads): every item of kScores (the unit's chunks of 32 positions), then of kProbs (its
// query rows), then of kOutputs (its pairs of 16-dimension groups), each step's items
// taken by any threads in any ranges [begin, end) once the step before has ended, on
// `shared` (attention_shared_floats of the unit, 64-byte aligned). The same bits as attend.
int64_t attention_items(const AttentionUnit& unit, AttentionStep step);
int64_t attention_shared_floats(const AttentionUnit& unit);
void attend_step(const AttentionUnit& unit, AttentionStep step, int64_t begin, int64_t end, float* shared);
// Position `row` of a block's keys or values of one KV head (bf16 [block_size, head_dim]
// in all) written from k or v rounded to bf16 as cpu::from_f32 rounds, in the layouts
// attend's tiles load straight from the cache. On any CPU.
//   keys: dimensions 2i and 2i + 1 side by side, element d of row r at (d / 2) * 2 *
//     block_size + 2 * r + d % 2;
//   values: positions 2j and 2j + 1 side by side, element d of row r at (r / 2) * 2 *
//     head_dim + 2 * d + r % 2.
void store_key(const float* k, int64_t head_dim, int64_t block_size, int64_t row, uint16_t* keys);
void store_value(const float* v, int64_t head_dim, int64_t row, uint16_t* values);

// dst[j * ds + i] = src[i * ss + j] for i, j < 16, 32-bit elements moved as bits, by AVX2
// shuffles: the GEMM's transposition of its outputs out of the tiles and of x into them,
// declared here for its test. Only on x86-64 Linux with AVX2 (every CPU with the tiles
// has it).
void transpose16(const float* src, int64_t ss, float* dst, int64_t ds);

// Register-only tile products on one thread (dot_loop_flops(n) floating-point operations:
// two per bf16 product), the peak the AMX GEMM is measured against. Only where
// instructions() is there.
float dot_loop(int64_t iterations);
int64_t dot_loop_flops(int64_t iterations);

// The GEMM's inner loop in rungs 0-3 and its probes 4-5 (amx_kernel.h's ladder) on one
// thread, over operands of its own (each thread's, made on its first call), blocked as
// the GEMM's switches say (TESSERA_AMX_KC): what the k steps cost besides the tile
// products, ladder_flops(passes) floating-point operations (rung 4 does none: the loads
// alone, counted as if its products ran). Only where instructions() is there.
float ladder(int rung, int64_t passes);
int64_t ladder_flops(int64_t passes);

// The GEMM of matmul_rows (tokens > 1, x packed as it packs it) with every tile operation
// left out, on one thread: its work around the tiles (x packed, the A tiles packed, the
// next weights asked for, the outputs taken out of the partial sums into y), what the
// GEMM costs besides its inner loop (cpu_matmul_bench's BM_AmxOutside). y gets whatever
// acc held. On any CPU where outside_runs() (AVX-512 BF16 rounds x, AVX2 transposes), the
// tiles or not.
bool outside_runs();
void outside(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, int64_t ldy);

}  // namespace tessera::cpu::amx
