#include "backend/cpu/cpu_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_groups.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/weight_layout.h"
#include "core/check.h"
#include "core/mapped_file.h"
#include "hwy/aligned_allocator.h"

namespace tessera {

std::unique_ptr<Device> make_cpu_device(size_t threads) { return std::make_unique<CpuDevice>(threads); }

namespace {

// Memory that place() leaves available after a weight's copy.
constexpr uint64_t kPlaceReserve = uint64_t{2} << 30;

// Buffers of at least this size are anonymous mappings (pages cost nothing until touched).
constexpr size_t kMapBytes = size_t{1} << 20;
constexpr size_t kAlign = 64;

void free_host(void* data, size_t bytes) {
  if (bytes >= kMapBytes) {
    ::munmap(data, bytes);
  } else {
    std::free(data);
  }
}

// Rows in units of the decode kernel's group (weight_layout.h's decode_rows).
void for_row_chunks(ThreadPool& pool, size_t n, int64_t group, const std::function<void(size_t, size_t)>& fn) {
  for_chunks(pool, n, static_cast<size_t>(cpu::decode_rows(group)), fn);
}

// How a GEMM call of `tokens` x n rows is cut into pieces for the threads: rows at the
// kernel's unit, tokens into as few blocks of its unit as give every thread about
// `per_thread` pieces (the guided chunks even them out), none where the row pieces are
// that many already: a piece reads all of its tokens' packed x for its rows, and its
// rows' weights once for its tokens. But no piece takes more than the kernel's
// most_tokens: the column kernels' 512-token pieces read their x's blocks (512 KiB) from
// L3 where 192-token ones stay in L2 (Zen 5, 2 threads, the 1B MLP and o at 512 tokens,
// in one process: f16 +4-7 %, bf16 +2-5 %, AVX2 f16 +2 %; docs/benchmarks.md, session
// 60). per_thread is TESSERA_GEMM_PIECES (default 2), read once; 0 cuts only the rows, at
// 32, as before the tokens were cut (for measuring one against the other in one binary).
// Which piece an output falls in never changes its bits.
cpu::MatmulSplit gemm_split(int64_t tokens, int64_t n, int64_t k, DType dtype, size_t threads) {
  static const int64_t per_thread = [] {
    const char* text = std::getenv("TESSERA_GEMM_PIECES");
    return text == nullptr ? 2 : std::max<int64_t>(0, std::strtoll(text, nullptr, 10));
  }();
  if (per_thread == 0) return {tokens, 32};
  cpu::MatmulSplit split = cpu::matmul_split(k, dtype);
  const int64_t row_pieces = (n + split.rows - 1) / split.rows;
  const int64_t units = (tokens + split.tokens - 1) / split.tokens;
  const int64_t wanted = (per_thread * static_cast<int64_t>(threads) + row_pieces - 1) / row_pieces;
  const int64_t fewest = split.most_tokens > 0 ? (tokens + split.most_tokens - 1) / split.most_tokens : 1;
  const int64_t blocks = std::clamp<int64_t>(std::max(wanted, fewest), 1, units);
  split.tokens = (units + blocks - 1) / blocks * split.tokens;
  return split;
}

// A decode matmul of at most this many weight bytes runs on the calling thread alone,
// where a parallel region's hand-offs cost more than the other threads save it. On the
// 2-core dev VM, quiet, a region costs about 3.5 us more than its work (Qwen3-30B-A3B's
// router, 512 KiB: 15 us in a region, 23 us alone; loaded, 31-142 us against 24), so
// with one thread reading about 23 GB/s the region wins above about 160 KB. Each row is
// the same matmul_rows sum either way.
constexpr size_t kCallerBytes = size_t{128} << 10;

// out[i] = silu(gate[i]) * up[i] for i in [begin, end): silu_mul's arithmetic, which
// gate_up's quantized path runs on each thread's rows (so the same bits either way).
void silu_mul_rows(const float* gate, const float* up, int64_t begin, int64_t end, float* out) {
  cpu::silu_mul(gate + begin, up + begin, end - begin, out + begin);
}

// Element-wise ops split over the threads in units of at least this many elements, so
// that a decode step's small ones (one token) stay on the calling thread. Every element
// is computed as before, by whichever thread, so the results do not change.
constexpr size_t kElementsPerUnit = 32768;
size_t rows_per_unit(int64_t row_elements) {
  return std::max<size_t>(1, kElementsPerUnit / static_cast<size_t>(std::max<int64_t>(1, row_elements)));
}

}  // namespace

CpuDevice::CpuDevice(size_t threads) : pool_(threads) { cpu::cap_isa_from_env(); }

std::string CpuDevice::name() const {
  return std::string("cpu (") + cpu::isa_name() +
         (cpu::amx_active() && cpu::columns_active(DType::kBF16)
              ? ", bf16 weights by AMX tiles (up to 8 tokens by vectors, the same bits)"
          : cpu::amx_active()      ? ", bf16 weights by AMX tiles"
          : cpu::bf16_dot_active() ? ", bf16 weights by AVX512_BF16 dot products"
                                   : "") +
         (cpu::amx::attention_enabled(cpu::amx::kAttentionChunk, cpu::amx::kAttentionChunk)
              ? ", attention over a bf16 cache by AMX tiles"
              : "") +
         (cpu::quant_tiles_active() ? ", Q8_0 and Q4_0 by AMX-INT8 tiles" : "") + ", " + std::to_string(pool_.size()) +
         " threads)";
}

Result<Buffer> CpuDevice::alloc(size_t bytes) {
  const size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  void* data = nullptr;
  if (rounded >= kMapBytes) {
    data = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) data = nullptr;
    // A KV pool's blocks are first touched mid-step, a page fault for each 4 KiB (a
    // 1B block of 16 positions is 1 MiB: 256 faults, 3-4 ms a block on the dev VM).
    if (data != nullptr) advise_huge_pages(data, rounded);
  } else {
    data = std::aligned_alloc(kAlign, rounded);
  }
  if (data == nullptr) return Status::overloaded("[cpu] cannot allocate " + std::to_string(bytes) + " bytes");
  return Buffer(data, rounded, free_host);
}

Result<TensorView> CpuDevice::place(const TensorView& host) {
  if (host.shape.size() != 2) return host;
  const int64_t rows = host.dim(0), k = host.dim(1), group = cpu::matmul_row_group(host.dtype);
  if (!cpu::can_interleave(host.dtype, rows, k, group)) return host;
  // A copy only where it leaves room: a checkpoint's pages are reclaimable (counted
  // available), but random weights are anonymous memory that stays, so a model of more than
  // about half the memory keeps the rest of its weights mapped (the same bits either way).
  if (host.nbytes() + kPlaceReserve > available_memory()) return host;
  TS_ASSIGN_OR_RETURN(Buffer buffer, alloc(host.nbytes()));
  // In units of about 1 MiB of weights.
  const int64_t group_rows = cpu::group_rows(group);
  const auto group_bytes = static_cast<size_t>(group_rows) * dtype_bytes(host.dtype, k);
  pool_.parallel_for(static_cast<size_t>(rows / group_rows), std::max<size_t>(1, (size_t{1} << 20) / group_bytes),
                     [&](size_t begin, size_t end) {
                       cpu::interleave_rows(host.data, host.dtype, k, group, static_cast<int64_t>(begin) * group_rows,
                                            static_cast<int64_t>(end) * group_rows, buffer.data());
                     });
  TensorView view = host;
  view.data = buffer.data();
  view.row_group = group;
  placed_.push_back(std::move(buffer));
  return view;
}

void CpuDevice::upload(const void* host, size_t bytes, void* dst) { std::memcpy(dst, host, bytes); }
void CpuDevice::download(const void* src, size_t bytes, void* host) { std::memcpy(host, src, bytes); }
void CpuDevice::copy(const void* src, size_t bytes, void* dst) { std::memcpy(dst, src, bytes); }

void CpuDevice::matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) {
  TS_CHECK(w.shape.size() == 2, "matmul weight shape ", shape_string(w.shape));
  const int64_t n = w.dim(0);
  const int64_t k = w.dim(1);
  const size_t row_bytes = static_cast<size_t>(k) * dtype_size(w.dtype);
  const auto* base = static_cast<const uint8_t*>(w.data);
  const bool quantized = dtype_is_quantized(w.dtype);
  if (!quantized && cpu::matmul_packed_floats(tokens, k, w.dtype) > 0) {  // prefill: the GEMM (its bias too)
    const Projection out{&w, &bias, y};
    return gemm_together(x, tokens, {&out, 1});
  }
  if (quantized) {
    cpu::quant_matmul(pool_, x, tokens, w, y);  // GGUF blocks (quant_matmul.h)
  } else if (static_cast<size_t>(n) * row_bytes <= kCallerBytes) {
    cpu::matmul_rows(x, tokens, k, base, w.dtype, n, y, n, w.row_group);
  } else {
    for_row_chunks(pool_, static_cast<size_t>(n), w.row_group, [&](size_t begin, size_t end) {
      cpu::matmul_rows(x, tokens, k, base + begin * row_bytes, w.dtype, static_cast<int64_t>(end - begin), y + begin, n,
                       w.row_group);
    });
  }
  add_bias(tokens, bias, n, y);
}

void CpuDevice::gemm_together(const float* x, int64_t tokens, std::span<const Projection> outs) {
  // Prefill: the threads pack x once between them, then deal out pieces of every weight's
  // rows x a block of tokens, the blocks in order. A thread's chunk of consecutive pieces
  // is one call per block and weight it spans. Each output is the one sum matmul_rows_packed
  // gives it, whatever piece holds it.
  const TensorView& w0 = *outs[0].w;
  const int64_t k = w0.dim(1);
  const size_t bytes = static_cast<size_t>(cpu::matmul_packed_floats(tokens, k, w0.dtype)) * sizeof(float);
  if (packed_x_.bytes() < bytes) {
    auto buffer = alloc(bytes);
    TS_CHECK(buffer.ok(), buffer.status().message());
    packed_x_ = std::move(*buffer);
  }
  float* packed = packed_x_.f32();
  // In units of 16 tokens (whole AMX token tiles, which pack_x transposes at once).
  pool_.parallel_for(static_cast<size_t>(tokens), 16, [&](size_t begin, size_t end) {
    cpu::matmul_pack_x(x, tokens, k, w0.dtype, static_cast<int64_t>(begin), static_cast<int64_t>(end), packed);
  });
  int64_t rows = 0;  // of all the weights, which share a split (their k and dtype)
  for (const Projection& out : outs) rows += out.w->dim(0);
  const cpu::MatmulSplit split = gemm_split(tokens, rows, k, w0.dtype, pool_.size());
  // Weight j's rows are pieces [first[j], first[j + 1]) of split.rows rows, in each block of tokens.
  std::vector<int64_t> first{0};
  for (const Projection& out : outs) first.push_back(first.back() + (out.w->dim(0) + split.rows - 1) / split.rows);
  const int64_t row_pieces = first.back();
  const int64_t blocks = (tokens + split.tokens - 1) / split.tokens;
  const size_t row_bytes = dtype_bytes(w0.dtype, k);
  for_chunks(pool_, static_cast<size_t>(blocks * row_pieces), 1, [&](size_t begin, size_t end) {
    for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end);) {
      const int64_t block = i / row_pieces, piece = i - block * row_pieces;
      const auto j = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), piece) - first.begin() - 1);
      const int64_t stop = std::min(static_cast<int64_t>(end), block * row_pieces + first[j + 1]);
      const TensorView& w = *outs[j].w;
      const int64_t n = w.dim(0), r0 = (piece - first[j]) * split.rows,
                    r1 = std::min(n, (stop - block * row_pieces - first[j]) * split.rows);
      const int64_t t0 = block * split.tokens, t1 = std::min(tokens, t0 + split.tokens);
      cpu::matmul_rows_packed(packed, x, tokens, t0, t1, k, static_cast<const uint8_t*>(w.data) + r0 * row_bytes,
                              w.dtype, r1 - r0, outs[j].y + r0, n, w.row_group);
      i = stop;
    }
  });
  for (const Projection& out : outs) add_bias(tokens, *out.bias, out.w->dim(0), out.y);
}

void CpuDevice::add_bias(int64_t tokens, const TensorView& bias, int64_t n, float* y) {
  if (bias.empty()) return;
  TS_CHECK(bias.numel() == n, "bias ", shape_string(bias.shape), " for ", n, " rows");
  std::vector<float> b(static_cast<size_t>(n));
  cpu::to_f32(bias.data, bias.dtype, n, b.data());
  for (int64_t t = 0; t < tokens; ++t) add(b.data(), n, y + t * n);
}

namespace {
bool matmuls_together_on() {
  static const bool on = [] {
    const char* text = std::getenv("TESSERA_MATMULS_TOGETHER");
    return text == nullptr || std::strcmp(text, "0") != 0;
  }();
  return on;
}
}  // namespace

bool CpuDevice::quantized_together(std::span<const Projection> outs) {
  return matmuls_together_on() && outs.size() > 1 &&
         std::all_of(outs.begin(), outs.end(), [](const Projection& out) { return dtype_is_quantized(out.w->dtype); });
}

bool CpuDevice::together(int64_t tokens, std::span<const Projection> outs) const {
  return matmuls_together_on() && outs.size() > 1 && std::all_of(outs.begin(), outs.end(), [&](const Projection& out) {
           const TensorView& w = *out.w;
           TS_CHECK(w.shape.size() == 2, "matmul weight shape ", shape_string(w.shape));
           return !dtype_is_quantized(w.dtype) && cpu::matmul_packed_floats(tokens, w.dim(1), w.dtype) == 0;
         });
}

bool CpuDevice::gemms_together(int64_t tokens, std::span<const Projection> outs) {
  return matmuls_together_on() && outs.size() > 1 && std::all_of(outs.begin(), outs.end(), [&](const Projection& out) {
           const TensorView& w = *out.w;
           return w.shape.size() == 2 && w.dtype == outs[0].w->dtype && w.dim(1) == outs[0].w->dim(1) &&
                  !dtype_is_quantized(w.dtype) && cpu::matmul_packed_floats(tokens, w.dim(1), w.dtype) > 0;
         });
}

void CpuDevice::matmuls(const float* x, int64_t tokens, std::span<const Projection> outs, const RowNorm& norm) {
  if (gemms_together(tokens, outs)) return gemm_together(normed(x, tokens, outs[0].w->dim(1), norm), tokens, outs);
  const bool quantized = quantized_together(outs);
  if (!quantized && !together(tokens, outs)) return Device::matmuls(x, tokens, outs, norm);
  x = normed(x, tokens, outs[0].w->dim(1), norm);
  if (quantized) {
    std::vector<cpu::QuantProjection> quant;
    for (const Projection& out : outs) quant.push_back({out.w, out.y});
    cpu::quant_matmuls(pool_, x, tokens, quant);
    for (const Projection& out : outs) add_bias(tokens, *out.bias, out.w->dim(0), out.y);
    return;
  }
  const std::vector<const float*> xs(outs.size(), x);
  tiles_together(tokens, xs, outs);
}

void CpuDevice::matmuls_each(int64_t tokens, std::span<const float* const> xs, std::span<const Projection> outs) {
  TS_CHECK(xs.size() == outs.size(), xs.size(), " xs for ", outs.size(), " matmuls");
  if (!together(tokens, outs)) return Device::matmuls_each(tokens, xs, outs);
  tiles_together(tokens, xs, outs);
}

void CpuDevice::tiles_together(int64_t tokens, std::span<const float* const> xs, std::span<const Projection> outs) {
  // Weight i's rows are units [first[i], first[i + 1]) of 16 rows (whole decode tiles); a
  // chunk of units may span several weights, and is whole groups of the decode kernel's
  // (decode_rows, as matmul deals them) where every weight is in one layout.
  constexpr int64_t kUnit = 16;
  std::vector<int64_t> first{0};
  int64_t group = outs[0].w->row_group;
  for (const Projection& out : outs) {
    first.push_back(first.back() + (out.w->dim(0) + kUnit - 1) / kUnit);
    if (out.w->row_group != group) group = 1;
  }
  const auto per_chunk = static_cast<size_t>(cpu::decode_rows(group) / kUnit);
  for_chunks(pool_, static_cast<size_t>(first.back()), per_chunk, [&](size_t begin, size_t end) {
    auto i = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), static_cast<int64_t>(begin)) -
                                 first.begin() - 1);
    for (auto unit = static_cast<int64_t>(begin); unit < static_cast<int64_t>(end); ++i) {
      const TensorView& w = *outs[i].w;
      const int64_t n = w.dim(0), k = w.dim(1), stop = std::min(static_cast<int64_t>(end), first[i + 1]);
      const int64_t r0 = (unit - first[i]) * kUnit, r1 = std::min(n, (stop - first[i]) * kUnit);
      const size_t row_bytes = static_cast<size_t>(k) * dtype_size(w.dtype);
      cpu::matmul_rows(xs[i], tokens, k, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * row_bytes,
                       w.dtype, r1 - r0, outs[i].y + r0, n, w.row_group);
      unit = stop;
    }
  });
  for (const Projection& out : outs) add_bias(tokens, *out.bias, out.w->dim(0), out.y);
}

void CpuDevice::rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& weight, float eps, float* y) {
  TS_CHECK(weight.numel() == dim, "norm weight ", shape_string(weight.shape), " for dim ", dim);
  std::vector<float> w(static_cast<size_t>(dim));
  cpu::to_f32(weight.data, weight.dtype, dim, w.data());
  pool_.parallel_for(static_cast<size_t>(rows), rows_per_unit(dim), [&](size_t begin, size_t end) {
    for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      const float mean_square = cpu::dot(xr, xr, dim) / static_cast<float>(dim);
      const float inv = 1.0f / std::sqrt(mean_square + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
    }
  });
}

void CpuDevice::embed(const TensorView& table, std::span<const int32_t> ids, float* y) {
  const int64_t hidden = table.dim(1);
  const size_t row_bytes = dtype_bytes(table.dtype, hidden);
  for (size_t t = 0; t < ids.size(); ++t) {
    TS_CHECK(ids[t] >= 0 && ids[t] < table.dim(0), "token id ", ids[t]);
    if (dtype_is_quantized(table.dtype) && table.row_group == 1) {
      cpu::dequantize_rows(static_cast<const uint8_t*>(table.data) + static_cast<size_t>(ids[t]) * row_bytes,
                           table.dtype, 1, hidden, y + static_cast<int64_t>(t) * hidden);
      continue;
    }
    if (table.row_group != 1) {
      cpu::interleaved_row_to_f32(table.data, table.dtype, hidden, table.row_group, ids[t],
                                  y + static_cast<int64_t>(t) * hidden);
      continue;
    }
    cpu::to_f32(static_cast<const uint8_t*>(table.data) + static_cast<size_t>(ids[t]) * row_bytes, table.dtype, hidden,
                y + static_cast<int64_t>(t) * hidden);
  }
}

void CpuDevice::rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0, const Rotary& r) {
  const int64_t dim = r.dim > 0 ? r.dim : head_dim, half = dim / 2;
  TS_CHECK(dim <= head_dim && dim % 2 == 0, "rotary dim ", dim, " of head_dim ", head_dim);
  // Pair i: dimensions (i, i + half), or (2i, 2i + 1) when interleaved.
  const int64_t first_step = r.interleaved ? 2 : 1, second = r.interleaved ? 1 : half;
  pool_.parallel_for(static_cast<size_t>(tokens), rows_per_unit(heads * head_dim), [&](size_t begin, size_t end) {
    std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
    for (auto t = static_cast<int64_t>(begin); t < static_cast<int64_t>(end); ++t) {
      const auto position = static_cast<float>(pos0 + t);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = position * r.inv_freq[static_cast<size_t>(i)];
        cos[static_cast<size_t>(i)] = std::cos(angle) * r.scaling;
        sin[static_cast<size_t>(i)] = std::sin(angle) * r.scaling;
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          float* pa = v + i * first_step;
          float* pb = pa + second;
          const float a = *pa;
          const float b = *pb;
          const float c = cos[static_cast<size_t>(i)];
          const float s = sin[static_cast<size_t>(i)];
          *pa = a * c - b * s;
          *pb = b * c + a * s;
        }
      }
    }
  });
}

void CpuDevice::kv_store(const KvPages& pages, int64_t layer, std::span<const int32_t> blocks, int64_t pos0,
                         int64_t tokens, const float* k, const float* v) {
  const int64_t hd = pages.head_dim, bs = pages.block_size;
  TS_CHECK(pos0 + tokens <= static_cast<int64_t>(blocks.size()) * bs, "positions up to ", pos0 + tokens, " in ",
           blocks.size(), " blocks");
  const size_t elem = dtype_size(pages.dtype);
  auto* base = static_cast<uint8_t*>(pages.base);
  const bool amx = amx_attention(pages);  // keys and values as attention's tiles load them
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t pos = pos0 + t;
    const int64_t block = blocks[static_cast<size_t>(pos / bs)];
    TS_CHECK(block >= 0 && block < pages.blocks, "block ", block, " of ", pages.blocks);
    for (int64_t h = 0; h < pages.n_kv_heads; ++h) {
      const int64_t row = (pos % bs) * hd;
      const float* src_k = k + (t * pages.n_kv_heads + h) * hd;
      const float* src_v = v + (t * pages.n_kv_heads + h) * hd;
      if (amx) {
        const auto region = [&](int kind) {
          return reinterpret_cast<uint16_t*>(base + pages.offset(block, layer, kind, h) * elem);
        };
        cpu::amx::store_key(src_k, hd, bs, pos % bs, region(0));
        cpu::amx::store_value(src_v, hd, pos % bs, region(1));
      } else {
        cpu::from_f32(src_k, hd, pages.dtype, base + (pages.offset(block, layer, 0, h) + row) * elem);
        cpu::from_f32(src_v, hd, pages.dtype, base + (pages.offset(block, layer, 1, h) + row) * elem);
      }
    }
  }
}

bool CpuDevice::amx_attention(const KvPages& pages) {
  return pages.dtype == DType::kBF16 && cpu::amx::attention_enabled(pages.head_dim, pages.block_size);
}

void CpuDevice::attention(const AttentionArgs& a) { cpu::paged_attention(pool_, a, amx_attention(*a.pages)); }

void CpuDevice::silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  pool_.parallel_for(static_cast<size_t>(n), kElementsPerUnit, [&](size_t begin, size_t end) {
    silu_mul_rows(gate, up, static_cast<int64_t>(begin), static_cast<int64_t>(end), out);
  });
}

void CpuDevice::gate_up(const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& b_gate,
                        const TensorView& w_up, const TensorView& b_up, float* up, float* out, const RowNorm& norm) {
  const Projection both[] = {{&w_gate, &b_gate, out}, {&w_up, &b_up, up}};
  if (gemms_together(tokens, both)) {
    gemm_together(normed(x, tokens, w_gate.dim(1), norm), tokens, both);
    return silu_mul(out, up, tokens * w_gate.dim(0), out);
  }
  if (!quantized_together(both) || !b_gate.empty() || !b_up.empty())
    return Device::gate_up(x, tokens, w_gate, b_gate, w_up, b_up, up, out, norm);
  x = normed(x, tokens, w_gate.dim(1), norm);
  cpu::quant_gate_up(pool_, x, tokens, w_gate, w_up, up, out, silu_mul_rows);
}

void CpuDevice::gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  pool_.parallel_for(static_cast<size_t>(n), kElementsPerUnit, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const float x = gate[i];
      out[i] = 0.5f * x * (1.0f + std::tanh(kBeta * (x + kKappa * x * x * x))) * up[i];
    }
  });
}

void CpuDevice::scale(float* x, int64_t n, float factor) {
  pool_.parallel_for(static_cast<size_t>(n), kElementsPerUnit, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) x[i] *= factor;
  });
}

void CpuDevice::add(const float* x, int64_t n, float* y) {
  pool_.parallel_for(static_cast<size_t>(n), kElementsPerUnit, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) y[i] += x[i];
  });
}

void CpuDevice::argmax(const float* x, int64_t rows, int64_t n, int32_t* y) {
  for (int64_t r = 0; r < rows; ++r) y[r] = static_cast<int32_t>(cpu::argmax(x + r * n, n));
}

void CpuDevice::gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim, float* y) {
  for (size_t r = 0; r < rows.size(); ++r)
    std::memcpy(y + static_cast<int64_t>(r) * dim, x + rows[r] * dim, static_cast<size_t>(dim) * sizeof(float));
}

void CpuDevice::scatter_add_rows(const float* x, const float* scale, std::span<const int32_t> rows, int64_t dim,
                                 float* y) {
  // Product, then sum, each rounded to f32 (as torch's index_add_ of weighted rows).
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* in = x + static_cast<int64_t>(r) * dim;
    float* out = y + rows[r] * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const float product = scale[r] * in[i];
      out[i] += product;
    }
  }
}

}  // namespace tessera
