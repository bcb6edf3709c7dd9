// How the rows of a matmul weight lie in CPU memory: a 16- or 32-bit weight in one of three
// layouts, a quantized one (Q8_0, Q4_0, the K types) as the file has it or in groups of 16
// rows (kQuantGroup, below); and CpuDevice::embed reads each, for a tied embedding:
//   group 1: as the checkpoint has them, each row's k elements one after another;
//   group g > 1: the rows in groups of g (`rows` a multiple of g), and within a group the
//     rows' 64-byte lines alternate: line j of the group's row r at (j * g + r) * 64 bytes
//     from the group's start (a row is a whole number of lines). CpuDevice::place copies
//     a weight into it, g being the rows of a one-token decode tile (matmul_row_group), so
//     that such a tile reads one sequential stream instead of g: decode's matmuls about
//     10 % faster on the Zen 5 dev VM (docs/benchmarks.md, session 38).
//   group kColumns (16-bit only): the rows in groups of 16, and within a group the rows'
//     units of k alternate, a unit being 2 elements of bf16 (a pair) or 1 of f16: unit u of
//     the group's row r at (16 u + r) units from the group's start, so that 16 rows' unit
//     is one vector of columns_kernel.h (64 bytes of bf16, 32 of f16). CpuDevice::place
//     copies 16-bit weights into it where a process takes that kernel for them
//     (matmul_row_group says so).
// Every matmul path reads rows and groups of lines; the column order (columns_kernel.h)
// reads all three. A path reads each element it read before, in the same order, from its
// new place: every sum is the same sequence of operations in any layout it reads (tests
// hold them bitwise). layout_row, line_stride and layout_at below are the line layouts'.
// A group starts at row g * n, where it would start in the first layout too: a call may
// take rows [r0, r1) at w + r0 * k whenever r0 is a multiple of the group's rows.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::cpu {

inline constexpr int64_t kLineBytes = 64;
inline constexpr int64_t kColumns = -16;  // the column layout's `group` (above)

// Rows a group of the layout holds (16 for kColumns).
inline int64_t group_rows(int64_t group) { return group == kColumns ? 16 : group; }

// Rows a one-token call in `group`'s layout reads side by side (columns_kernel.h's
// lagged_columns: 4 columns of 16 rows; other layouts' decode tiles: 16), the unit a decode
// matmul's rows are dealt to threads in. A chunk of 16 rows in the column layout left the
// kernel a group of 1-3 columns at the end of most chunks: fewer streams at once, 2-3 %
// slower in all (docs/benchmarks.md, session 59).
inline constexpr int64_t decode_rows(int64_t group) { return group == kColumns ? 64 : 16; }

template <typename T>
inline constexpr int64_t kLineElements = kLineBytes / static_cast<int64_t>(sizeof(T));

// Row r's first element (r counted from a call's first row, at a whole group).
template <typename T>
inline const T* layout_row(const T* w, int64_t k, int64_t group, int64_t r) {
  return w + r / group * group * k + r % group * kLineElements<T>;
}

// Elements from a row's first to the first of its next 64-byte line.
template <typename T>
inline int64_t line_stride(int64_t group) {
  return group * kLineElements<T>;
}

// Element i of a row, from the row's first (i and the run read from it in one line).
template <typename T>
inline int64_t layout_at(int64_t i, int64_t group) {
  return i / kLineElements<T> * line_stride<T>(group) + i % kLineElements<T>;
}

// Groups of kRows rows that one-token decode reads side by side (bf16_dot_kernel.h's and
// matmul.cpp's decode_groups): as many as keep 16 accumulators, so that each thread reads
// two or more sequential streams, which memory serves faster than one (a hint, like the
// layout: the same bits).
template <int kRows>
inline constexpr int kSideBySide = kRows < 16 ? 16 / kRows : 1;

// Q8_0, Q4_0 and the K types in groups of kQuantGroup rows, the layout of quant_groups.cpp's
// kernels (CpuDevice::place lays Q8_0 and Q4_0 out so; the K types' rows stay as mapped, for
// quant_dot.cpp's row kernels' decode, and go through a group at a time from 16 tokens on):
// the group's units (blocks) one after another, a unit being 16 rows' blocks rearranged
// so that one 64-byte load gives 4 bytes of every row:
//   Q8_0 and Q4_0 (blocks of 34 and 18 bytes: an f16 d, then 32 int8 or 16 bytes of
//     nibbles): the 16 rows' d, then 8 or 4 slices of 64 bytes, slice j the rows' bytes
//     4j..4j+3 after d (row r's at 4r);
//   Q4_K and Q5_K (blocks of 144 and 176 bytes): the block's 4-byte slices, slice s the 16
//     rows' bytes 4s..4s+3 (row r's at 64 s + 4r): (d, dmin), the 12 bytes of scales and
//     mins, (Q5_K) the 32 bytes of fifth bits, the 128 bytes of nibbles;
//   Q6_K (blocks of 210 bytes: ql[128], qh[64], 16 int8 scales, an f16 d): the 16 rows' d,
//     then 4 chunks in the order the kernels read them, chunk 2h + l (h, l in {0, 1}) the 12
//     four-byte slices of elements 128 h + 32 q + 16 l + (0..15) (q = 0..3): ql's bytes
//     64 h + 16 l + (0..15), ql's 64 h + 32 + 16 l + (0..15), qh's 32 h + 16 l + (0..15),
//     then those elements' 4 scales (8 h + 2 q + l) a byte of every row at a time (row r's
//     at r), so that one load gives a scale of every row.
inline constexpr int64_t kQuantGroup = 16;
// Q8_0 and Q4_0: blocks of 32 elements that begin with their f16 d, against Q8_0 activations
// (their groups the same formula, their AMX-INT8 tiles one kernel).
inline constexpr bool block32(DType dtype) { return dtype == DType::kQ8_0 || dtype == DType::kQ4_0; }
// Whether quant_groups.cpp's kernels read weights of `dtype` (Q8_0, Q4_0 and the K types).
inline constexpr bool takes_quant_groups(DType dtype) {
  return block32(dtype) || dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ6_K;
}
// Bytes of a group's unit.
inline constexpr int64_t quant_unit_bytes(DType dtype) {
  return kQuantGroup * static_cast<int64_t>(dtype_block_bytes(dtype));
}
// Where byte i of row r's block lies in its group's unit.
inline constexpr int64_t quant_unit_offset(DType dtype, int64_t i, int64_t r) {
  if (block32(dtype)) return i < 2 ? 2 * r + i : 32 + (i - 2) / 4 * 64 + 4 * r + (i - 2) % 4;
  if (dtype == DType::kQ6_K) {
    constexpr int64_t kChunk = 13 * 64;  // 12 slices and 4 scales of 16 rows
    if (i >= 208) return 2 * r + i - 208;
    if (i >= 192) {  // scale g
      const int64_t g = i - 192;
      return 32 + kChunk * (2 * (g / 8) + g % 2) + 12 * 64 + 16 * (g % 8 / 2) + r;
    }
    // ql (slices 0-7 of a chunk) or qh (8-11): byte l of its 32 for half h
    const bool high = i >= 128;
    const int64_t h = high ? (i - 128) / 32 : i / 64, l = high ? (i - 128) % 32 : i % 32;
    const int64_t slice = high ? 8 + l % 16 / 4 : 4 * (i % 64 / 32) + l % 16 / 4;
    return 32 + kChunk * (2 * h + l / 16) + 64 * slice + 4 * r + l % 4;
  }
  return i / 4 * 64 + 4 * r + i % 4;
}

// n (at most 16; the rest zeros) rows of `units` blocks, row_bytes apart, as one group.
void quant_group(DType dtype, const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t units, uint8_t* group);

// Whether a [rows, k] weight of `dtype` can take groups of `group` rows: a plain 16- or
// 32-bit type, a group of 4, 8 or 16 (the decode tiles' rows), rows a multiple of it and a
// row whole lines; or kColumns for bf16 or f16, rows a multiple of 16 and a row whole lines;
// or kQuantGroup for Q8_0, Q4_0 and the K types, rows a multiple of 16.
bool can_interleave(DType dtype, int64_t rows, int64_t k, int64_t group);

// src (rows one after another) into dst in groups of `group` rows (can_interleave), rows
// [begin, end) of it (whole groups), so that threads may share one weight.
void interleave_rows(const void* src, DType dtype, int64_t k, int64_t group, int64_t begin, int64_t end, void* dst);

// Row r of w in `group`'s layout as f32 (k elements): an embedding's lookup.
void interleaved_row_to_f32(const void* w, DType dtype, int64_t k, int64_t group, int64_t r, float* out);

}  // namespace tessera::cpu
