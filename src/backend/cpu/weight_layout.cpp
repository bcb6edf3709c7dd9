#include "backend/cpu/weight_layout.h"

#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "core/check.h"

namespace tessera::cpu {

namespace {

// Row r of a group as its `units` plain blocks (an embedding's row: a byte at a time).
void quant_ungroup_row(DType dtype, const uint8_t* group, int64_t units, int64_t r, uint8_t* blocks) {
  const auto block = static_cast<int64_t>(dtype_block_bytes(dtype));
  for (int64_t u = 0; u < units; ++u)
    for (int64_t i = 0; i < block; ++i)
      blocks[u * block + i] = group[u * quant_unit_bytes(dtype) + quant_unit_offset(dtype, i, r)];
}

}  // namespace

void quant_group(DType dtype, const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t units, uint8_t* group) {
  TS_CHECK(takes_quant_groups(dtype) && n >= 1 && n <= kQuantGroup, "[cpu] a ", dtype_name(dtype), " group of ", n,
           " rows");
  const auto block = static_cast<int64_t>(dtype_block_bytes(dtype));
  // The block's 4-byte slices (all of Q4_K's and Q5_K's bytes, Q6_K's ql and qh, Q8_0's and
  // Q4_0's qs), then the bytes that go alone (Q8_0's, Q4_0's and Q6_K's d, Q6_K's scales): a copy of a
  // size known here each (prefill copies a group a call).
  const int64_t first = block32(dtype) ? 2 : 0, last = dtype == DType::kQ6_K ? 192 : block;
  int64_t at[64];  // each slice's place in a unit, row 0's (at most 52 slices)
  const int64_t slices = (last - first) / 4;
  for (int64_t k = 0; k < slices; ++k) at[k] = quant_unit_offset(dtype, first + 4 * k, 0);
  if (n < kQuantGroup) std::memset(group, 0, static_cast<size_t>(units * quant_unit_bytes(dtype)));
  for (int64_t u = 0; u < units; ++u) {
    uint8_t* unit = group + u * quant_unit_bytes(dtype);
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* b = rows + r * row_bytes + u * block;
      for (int64_t k = 0; k < slices; ++k) std::memcpy(unit + at[k] + 4 * r, b + first + 4 * k, 4);
      for (int64_t i = 0; i < first; ++i) unit[quant_unit_offset(dtype, i, r)] = b[i];
      for (int64_t i = last; i < block; ++i) unit[quant_unit_offset(dtype, i, r)] = b[i];
    }
  }
}

bool can_interleave(DType dtype, int64_t rows, int64_t k, int64_t group) {
  if (takes_quant_groups(dtype))
    return group == kQuantGroup && rows > 0 && rows % kQuantGroup == 0 && k % dtype_block_elements(dtype) == 0;
  const bool plain = dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
  const bool shape =
      group == 4 || group == 8 || group == 16 || (group == kColumns && (dtype == DType::kBF16 || dtype == DType::kF16));
  return plain && shape && rows > 0 && rows % group_rows(group) == 0 &&
         static_cast<int64_t>(dtype_size(dtype)) * k % kLineBytes == 0;
}

namespace {

// Bytes a row keeps together in a group (a line, or a column's unit: 4 bytes of bf16, 2 of
// f16) and rows a group.
struct Unit {
  int64_t bytes, rows;
};
Unit unit_of(int64_t group, DType dtype) {
  if (group != kColumns) return {kLineBytes, group};
  return {dtype == DType::kBF16 ? 4 : 2, 16};
}

// One group: unit j of row r (of `rows`, row_bytes apart from `in`) to unit j * rows + r of
// `block`, the units of a size known here (so each copy is a move, not a call).
template <int64_t kBytes>
void interleave_group(const uint8_t* in, int64_t row_bytes, int64_t rows, int64_t units, uint8_t* block) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < units; ++j)
      std::memcpy(block + (j * rows + r) * kBytes, in + r * row_bytes + j * kBytes, kBytes);
}

}  // namespace

void interleave_rows(const void* src, DType dtype, int64_t k, int64_t group, int64_t begin, int64_t end, void* dst) {
  if (takes_quant_groups(dtype)) {
    TS_CHECK(group == kQuantGroup && begin % group == 0 && end % group == 0, "[cpu] ", dtype_name(dtype), " rows [",
             begin, ", ", end, ") in groups of ", group);
    const int64_t units = k / dtype_block_elements(dtype), row_bytes = static_cast<int64_t>(dtype_bytes(dtype, k));
    for (int64_t g = begin; g < end; g += group)
      quant_group(dtype, static_cast<const uint8_t*>(src) + g * row_bytes, row_bytes, group, units,
                  static_cast<uint8_t*>(dst) + g * row_bytes);
    return;
  }
  const Unit unit = unit_of(group, dtype);
  TS_CHECK(begin % unit.rows == 0 && end % unit.rows == 0, "[cpu] interleaving rows [", begin, ", ", end,
           ") in groups of ", group);
  const int64_t row_bytes = static_cast<int64_t>(dtype_size(dtype)) * k, units = row_bytes / unit.bytes;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = begin; g < end; g += unit.rows) {
    const uint8_t* rows = in + g * row_bytes;
    uint8_t* block = out + g * row_bytes;
    switch (unit.bytes) {
      case 2: interleave_group<2>(rows, row_bytes, unit.rows, units, block); break;
      case 4: interleave_group<4>(rows, row_bytes, unit.rows, units, block); break;
      default: interleave_group<kLineBytes>(rows, row_bytes, unit.rows, units, block);
    }
  }
}

void interleaved_row_to_f32(const void* w, DType dtype, int64_t k, int64_t group, int64_t r, float* out) {
  if (takes_quant_groups(dtype)) {
    const int64_t units = k / dtype_block_elements(dtype), row_bytes = static_cast<int64_t>(dtype_bytes(dtype, k));
    thread_local std::vector<uint8_t> blocks;
    blocks.resize(static_cast<size_t>(row_bytes));
    quant_ungroup_row(dtype, static_cast<const uint8_t*>(w) + r / group * group * row_bytes, units, r % group,
                      blocks.data());
    return dequantize_rows(blocks.data(), dtype, 1, k, out);
  }
  const Unit unit = unit_of(group, dtype);
  const int64_t row_bytes = static_cast<int64_t>(dtype_size(dtype)) * k;
  const auto* first =
      static_cast<const uint8_t*>(w) + r / unit.rows * unit.rows * row_bytes + r % unit.rows * unit.bytes;
  thread_local std::vector<uint8_t> row;  // the row's units gathered, then widened at once
  row.resize(static_cast<size_t>(row_bytes));
  for (int64_t j = 0; j < row_bytes / unit.bytes; ++j)
    std::memcpy(row.data() + j * unit.bytes, first + j * unit.rows * unit.bytes, static_cast<size_t>(unit.bytes));
  to_f32(row.data(), dtype, k, out);
}

}  // namespace tessera::cpu
