// CudaDevice: the Device interface on one NVIDIA GPU. Its memory is device
// memory (cudaMalloc); weights are copied there once by place() and kept until
// the device is destroyed. All work runs in order on one stream; download()
// waits for it. Token ids and block tables arrive as host spans and go to the
// device through a staging arena (stage()) just before the kernel that reads
// them; the stream keeps the copies and kernels in order.
//
// With TESSERA_CUDA_GRAPHS=1 a decode step runs as a CUDA graph
// (begin_step/end_step): its launches are recorded by stream capture, then run
// through the executable graph of an earlier step with as many nodes, updated
// in place to this step's parameters (positions, sizes, pointers), or a new one
// when CUDA refuses the update. The kernels and their order are the recorded
// ones, so the bits are the same as launched one by one. Whatever must wait for
// the stream (a download, an upload from pageable memory, growing a scratch
// buffer) first ends the recording and runs it. Off by default: on the H200,
// recording a step cost more than its launches (the host issues them faster
// than the kernels run, and programmatic dependent launches already close the
// gaps between kernels: docs/gpu.md).
//
// TESSERA_CUDA_PROFILE_STEPS=N brackets N decode steps, from the
// TESSERA_CUDA_PROFILE_FROM-th (counted from 1, default 2), with
// cudaProfilerStart/Stop, so that `ncu --profile-from-start off` (tools/gpu/check.sh
// profile) times exactly those steps' kernels, whatever came before them.
//
// A GPU fault is a bug, not an input error: a failed launch or copy stops the
// process with the CUDA error. Running out of memory is an input the caller
// handles: alloc() and place() return kOverloaded naming what did not fit.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/moe.cuh"
#include "backend/cuda/quant.cuh"
#include "backend/device.h"
#include "core/check.h"

namespace tessera {

namespace {

void check(cudaError_t error, const char* what) {
  TS_CHECK(error == cudaSuccess, "[cuda] ", what, ": ", cudaGetErrorString(error));
}

void free_device(void* data, size_t /*bytes*/) { cudaFree(data); }

// The number an environment variable holds (`unset` when it is not set or empty; 0 when it is not a number).
int64_t count_in(const char* name, int64_t unset = 0) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::max<int64_t>(0, std::atoll(value)) : unset;
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  return text;
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, std::string name, cudaStream_t stream)
      : ordinal_(ordinal), name_(std::move(name)), stream_(stream), graphs_(cuda::asked("TESSERA_CUDA_GRAPHS")) {}
  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    run_recorded();
    cudaStreamSynchronize(stream_);
    for (const auto& [nodes, exec] : execs_) cudaGraphExecDestroy(exec);
    placed_.clear();
    arena_ = Buffer();
    if (arena_host_ != nullptr) cudaFreeHost(arena_host_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }

  uint64_t available_memory() const override {
    select();
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "reading free memory");
    return free;
  }

  double measure_bf16_peak() override {
    select();
    run_recorded();
    return cuda::mma_peak(stream_);
  }

  Result<Buffer> alloc(size_t bytes) override {
    select();
    void* data = nullptr;
    const cudaError_t error = cudaMalloc(&data, std::max<size_t>(bytes, 1));
    if (error != cudaSuccess) {
      cudaGetLastError();  // clear the sticky out-of-memory error
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      return Status::overloaded("[" + name_ + "] cannot allocate " + gib(bytes) + " (" + gib(free) + " free of " +
                                gib(total) + "): " + cudaGetErrorString(error));
    }
    return Buffer(data, bytes, free_device);
  }

  void upload(const void* host, size_t bytes, void* dst) override {
    select();
    run_recorded();  // host memory that may be pageable: copied now
    ++launches_;
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "upload");
  }

  void download(const void* src, size_t bytes, void* host) override {
    select();
    run_recorded();
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    check(cudaStreamSynchronize(stream_), "the work before a download");
  }

  void copy(const void* src, size_t bytes, void* dst) override {
    select();
    ++launches_;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
  }

  Result<TensorView> place(const TensorView& host) override {
    const bool quantized = dtype_is_quantized(host.dtype);  // GGUF blocks (quant.cuh)
    if (host.dtype != DType::kF32 && host.dtype != DType::kBF16 && host.dtype != DType::kF16 && !quantized)
      return Status::unsupported("[" + name_ + "] computes on f32, bf16, f16 or GGUF block weights, not " +
                                 std::string(dtype_name(host.dtype)) + " " + shape_string(host.shape));
    // Blocks are read in 16-byte pieces: up to the next multiple of 16, zeroed.
    const size_t padded = quantized ? (host.nbytes() + 15) / 16 * 16 : host.nbytes();
    auto buffer = alloc(padded);
    if (!buffer.ok())
      return Status::overloaded("a " + std::string(dtype_name(host.dtype)) + " " + shape_string(host.shape) +
                                " weight does not fit: " + buffer.status().message());
    run_recorded();
    check(cudaMemcpy(buffer->data(), host.data, host.nbytes(), cudaMemcpyHostToDevice), "copying a weight");
    if (padded > host.nbytes())
      check(cudaMemset(static_cast<uint8_t*>(buffer->data()) + host.nbytes(), 0, padded - host.nbytes()), "padding");
    TensorView placed = host;
    placed.data = buffer->data();
    placed_.push_back(std::move(*buffer));
    return placed;
  }

  void begin_step() override {
    if (++decode_steps_ == profile_from_ && profile_steps_ > 0) check(cudaProfilerStart(), "starting the profiler");
    if (!graphs_ || recording_) return;
    select();
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "recording a step");
    recording_ = true;
  }

  void end_step() override {
    run_recorded();
    if (profile_steps_ > 0 && decode_steps_ == profile_from_ + profile_steps_ - 1)
      check(cudaProfilerStop(), "stopping the profiler");
  }

  int64_t steps_as_graphs() const override { return graph_steps_; }

  void matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) override {
    launch_matmul(x, tokens, w, bias, y, false);
  }

  void matmul_add(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* /*scratch*/,
                  float* y, const RowNorm& next) override {
    launch_matmul(x, tokens, w, bias, y, true, next);
  }

  // One launch when every weight takes the tensor-core kernel with the same k.
  void matmuls(const float* x, int64_t tokens, std::span<const Projection> outs, const RowNorm& norm) override {
    const int64_t k = outs.empty() ? 0 : outs[0].w->dim(1);
    const bool blocks = !outs.empty() && std::all_of(outs.begin(), outs.end(), [&](auto& o) {
      return dtype_is_quantized(o.w->dtype) && o.w->shape.size() == 2 && o.w->dim(1) == k;
    });
    if (blocks) return quant_matmuls(x, tokens, outs, norm);
    const bool together =
        outs.size() <= cuda::MmaJob::kMaxWeights && std::all_of(outs.begin(), outs.end(), [&](auto& o) {
          return cuda::mma_matmul_fits(o.w->dtype, o.w->dim(1)) && o.w->dim(1) == k;
        });
    if (!together) return Device::matmuls(x, tokens, outs, norm);
    cuda::MmaJob job{.count = static_cast<int>(outs.size())};
    for (size_t i = 0; i < outs.size(); ++i) {
      check_weight(*outs[i].w, *outs[i].bias);
      add_to_job(job, static_cast<int>(i), *outs[i].w, *outs[i].bias, outs[i].y);
    }
    run_mma(normalize(x, tokens, k, norm, job), tokens, k, job);
    launched("matmuls");
  }

  void gate_up(const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& b_gate,
               const TensorView& w_up, const TensorView& b_up, float* up, float* out, const RowNorm& norm) override {
    // GGUF blocks: x rounded once, gate into out and up into `up` (one launch when
    // they share a dtype), then out = SiLU(out) * up rounded for the down matmul.
    if (dtype_is_quantized(w_gate.dtype) && dtype_is_quantized(w_up.dtype) && w_up.shape == w_gate.shape &&
        w_gate.shape.size() == 2 && cuda::quant_same_rounding(w_gate.dtype, w_up.dtype)) {
      const Projection both[] = {{&w_gate, &b_gate, out}, {&w_up, &b_up, up}};
      quant_matmuls(x, tokens, both, norm);
      const int64_t n = w_gate.dim(0), elements = dtype_block_elements(w_gate.dtype);
      if (n % elements != 0) return silu_mul(out, up, tokens * n, out);  // no down on blocks takes rows of n
      void* scratch = quant_scratch(tokens, n);
      cuda::quant_round_gated(stream_, out, up, tokens, n, w_gate.dtype, scratch);
      launched("quant_round_gated");
      quant_rounded_ = {out, tokens, n, elements, launches_};
      return;
    }
    const bool fused =
        cuda::mma_matmul_fits(w_gate.dtype, w_gate.dim(1)) && w_up.dtype == w_gate.dtype && w_up.shape == w_gate.shape;
    if (!fused) return Device::gate_up(x, tokens, w_gate, b_gate, w_up, b_up, up, out, norm);
    check_weight(w_gate, b_gate);
    check_weight(w_up, b_up);
    cuda::MmaJob job{.count = 1, .gate_up = true};
    add_to_job(job, 0, w_gate, b_gate, out);
    add_to_job(job, 1, w_up, b_up, nullptr);
    job.y_bf16 = rounded_for(tokens, w_gate.dim(0), rounded_buffer_);
    run_mma(normalize(x, tokens, w_gate.dim(1), norm, job), tokens, w_gate.dim(1), job);
    launched("gate_up");
    if (job.y_bf16 != nullptr) rounded_ = {out, tokens, w_gate.dim(0), launches_, job.y_bf16};
  }

  void rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& weight, float eps, float* y) override {
    TS_CHECK(weight.numel() == dim, "norm weight ", shape_string(weight.shape), " for dim ", dim);
    select();
    cuda::rms_norm(stream_, x, rows, dim, weight.data, weight.dtype, eps, y);
    launched("rms_norm");
  }

  void embed(const TensorView& table, std::span<const int32_t> ids, float* y) override {
    for (const int32_t id : ids) TS_CHECK(id >= 0 && id < table.dim(0), "token id ", id);
    const int32_t* device_ids = stage(ids);
    if (dtype_is_quantized(table.dtype)) {
      cuda::quant_embed(stream_, table.data, table.dtype, table.dim(1), device_ids, static_cast<int64_t>(ids.size()),
                        y);
      return launched("quant_embed");
    }
    cuda::embed(stream_, table.data, table.dtype, table.dim(1), device_ids, static_cast<int64_t>(ids.size()), y);
    launched("embed");
  }

  void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0, const Rotary& rotary) override {
    const SeqSlice part{tokens, pos0, {}};
    cuda::rope_store(stream_, x, heads, nullptr, nullptr, 0, head_dim, nullptr, 0, tokens, map({&part, 1}, false),
                     rotary);
    launched("rope");
  }

  void kv_store(const KvPages& pages, int64_t layer, std::span<const int32_t> blocks, int64_t pos0, int64_t tokens,
                const float* k, const float* v) override {
    const SeqSlice part{tokens, pos0, blocks};
    const cuda::TokenMap tokens_map = map({&part, 1}, true, &pages);
    cuda::rope_store(stream_, nullptr, 0, const_cast<float*>(k), v, pages.n_kv_heads, pages.head_dim, &pages, layer,
                     tokens, tokens_map, Rotary{});
    launched("kv_store");
  }

  void attention(const AttentionArgs& a) override {
    TS_CHECK(a.pages->n_kv_heads > 0 && a.n_heads % a.pages->n_kv_heads == 0, "heads ", a.n_heads, " kv heads ",
             a.pages->n_kv_heads);
    const SeqSlice part{a.tokens, a.pos0, a.blocks};
    run_attention(a.q, a.out, a.n_heads, *a.pages, a.layer, {&part, 1}, map({&part, 1}, true, a.pages),
                  a.sliding_window, a.scale);
  }

  void attend(const AttendArgs& a) override {
    // longrope picks its frequencies part by part: the default's rope, store and attention per part.
    if (a.long_inv_freq != nullptr) return Device::attend(a);
    const KvPages& p = *a.pages;
    TS_CHECK(p.n_kv_heads > 0 && a.n_heads % p.n_kv_heads == 0, "heads ", a.n_heads, " kv heads ", p.n_kv_heads);
    const int64_t tokens = tokens_of(a.parts);
    const cuda::TokenMap tokens_map = map(a.parts, true, &p);
    cuda::rope_store(stream_, a.q, a.n_heads, a.k, a.v, p.n_kv_heads, p.head_dim, &p, a.layer, tokens, tokens_map,
                     a.rotary);
    launched("rope_store");
    attend_stored(a, tokens, tokens_map);
  }

  // A step's q, k and v by matmuls that also turn q and k and store k and v
  // (MmaJob::rope; TESSERA_CUDA_ROPE_IN_MATMUL=0: never, read at every call), then
  // its attention: no rope_store launch.
  void project_attend(const float* x, int64_t tokens, std::span<const Projection, 3> qkv, const RowNorm& norm,
                      const AttendArgs& a) override {
    const int64_t k = qkv[0].w->dim(1);
    const bool fused =
        a.long_inv_freq == nullptr && qkv[0].y == a.q && qkv[1].y == a.k && qkv[2].y == a.v &&
        std::all_of(qkv.begin(), qkv.end(),
                    [&](auto& o) { return cuda::mma_matmul_fits(o.w->dtype, o.w->dim(1)) && o.w->dim(1) == k; }) &&
        qkv[2].w->dim(0) == qkv[1].w->dim(0) &&
        cuda::mma_rope_fits(tokens, k, qkv[0].w->dim(0), qkv[1].w->dim(0), *a.pages, a.rotary);
    if (!fused) return Device::project_attend(x, tokens, qkv, norm, a);
    const KvPages& p = *a.pages;
    TS_CHECK(tokens_of(a.parts) == tokens, "attention parts of ", tokens_of(a.parts), " tokens for ", tokens);
    TS_CHECK(p.n_kv_heads > 0 && a.n_heads % p.n_kv_heads == 0, "heads ", a.n_heads, " kv heads ", p.n_kv_heads);
    const cuda::TokenMap tokens_map = map(a.parts, true, &p);
    cuda::MmaJob job{.count = 3};
    for (int i = 0; i < 3; ++i) {
      check_weight(*qkv[i].w, *qkv[i].bias);
      add_to_job(job, i, *qkv[i].w, *qkv[i].bias, qkv[i].y);
    }
    job.rope = {.inv_freq = a.rotary.inv_freq,
                .scaling = a.rotary.scaling,
                .head_dim = p.head_dim,
                .pages = p,
                .layer = a.layer,
                .map = tokens_map};
    run_mma(normalize(x, tokens, k, norm, job), tokens, k, job);
    launched("matmuls_rope_store");
    attend_stored(a, tokens, tokens_map);
  }

  static int64_t tokens_of(std::span<const SeqSlice> parts) {
    int64_t tokens = 0;
    for (const SeqSlice& part : parts) tokens += part.tokens;
    return tokens;
  }

  // attend's attention, once q is turned and k and v are stored.
  void attend_stored(const AttendArgs& a, int64_t tokens, cuda::TokenMap tokens_map) {
    const KvPages& p = *a.pages;
    const int64_t width = a.n_heads * p.head_dim;
    __nv_bfloat16* rounded = cuda::mma_attention_fits(p, a.n_heads, a.sliding_window)
                                 ? rounded_for(tokens, width, rounded_buffer_)
                                 : nullptr;
    run_attention(a.q, a.out, a.n_heads, p, a.layer, a.parts, tokens_map, a.sliding_window, a.scale, rounded);
    if (rounded != nullptr) rounded_ = {a.out, tokens, width, launches_, rounded};
  }

  void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) override {
    select();
    cuda::gelu_tanh_mul(stream_, gate, up, n, out);
    launched("gelu_tanh_mul");
  }

  void scale(float* x, int64_t n, float factor) override {
    select();
    cuda::scale(stream_, x, n, factor);
    launched("scale");
  }

  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    select();
    cuda::silu_mul(stream_, gate, up, n, out);
    launched("silu_mul");
  }

  void add(const float* x, int64_t n, float* y) override {
    select();
    cuda::add(stream_, x, n, y);
    launched("add");
  }

  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim, float* y) override {
    if (rows.empty()) return;
    cuda::gather_rows(stream_, x, stage(rows), static_cast<int64_t>(rows.size()), dim, y);
    launched("gather_rows");
  }

  void scatter_add_rows(const float* x, const float* scale, std::span<const int32_t> rows, int64_t dim,
                        float* y) override {
    if (rows.empty()) return;
    cuda::scatter_add_rows(stream_, x, scale, stage(rows), static_cast<int64_t>(rows.size()), dim, y);
    launched("scatter_add_rows");
  }

  void argmax(const float* x, int64_t rows, int64_t n, int32_t* y) override {
    select();
    cuda::argmax(stream_, x, rows, n, y);
    launched("argmax");
  }

 private:
  // CUDA keeps the current device per host thread; every entry point selects ours.
  void select() const { check(cudaSetDevice(ordinal_), "selecting the device"); }
  void launched(const char* kernel) {
    check(cudaGetLastError(), kernel);
    ++launches_;
  }

  // Where a tiled matmul's output or attention's writes its values rounded to bf16
  // as well ([tokens, width], into `buffer`), when the next call may be a tiled
  // matmul of them (TESSERA_CUDA_ROUNDED_X=0: never); rounded_ then names them, and
  // run_mma takes them instead of rounding x again if nothing was launched in between.
  __nv_bfloat16* rounded_for(int64_t tokens, int64_t width, Buffer& buffer) {
    static const bool off = cuda::switched_off("TESSERA_CUDA_ROUNDED_X");
    if (off || tokens < cuda::mma_gemm_min_tokens() || !cuda::mma_matmul_fits(DType::kBF16, width)) return nullptr;
    return static_cast<__nv_bfloat16*>(grow(buffer, sizeof(__nv_bfloat16) * tokens * width, "rounded x"));
  }

  // `next` (matmul_add's) for a tiled matmul that adds split sums: y normalized into
  // normed_buffer_ by that launch (TESSERA_CUDA_NORM_AHEAD=0: never, read at every call).
  void normalize_ahead(cuda::MmaJob& job, int64_t tokens, int64_t k, const RowNorm& next) {
    if (next.weight == nullptr || next.weight->dtype != DType::kBF16 || next.weight->numel() != job.n[0] ||
        !cuda::mma_gemm_normalizes_ahead(tokens, k, job) || cuda::switched_off("TESSERA_CUDA_NORM_AHEAD"))
      return;
    job.next_norm = static_cast<const __nv_bfloat16*>(next.weight->data);
    job.next_eps = next.eps;
    job.next_x = rounded_for(tokens, job.n[0], normed_buffer_);
  }

  void launch_matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y,
                     bool accumulate, const RowNorm& next = {}) {
    if (dtype_is_quantized(w.dtype)) return launch_quant(x, tokens, w, bias, y, accumulate);
    check_weight(w, bias);
    select();
    const int64_t k = w.dim(1);
    if (!cuda::mma_matmul_fits(w.dtype, k)) {
      cuda::matmul(stream_, x, tokens, k, w.data, w.dtype, w.dim(0), bias.data, bias.dtype, y, accumulate);
      return launched("matmul");
    }
    cuda::MmaJob job{.count = 1, .accumulate = accumulate};
    add_to_job(job, 0, w, bias, y);
    normalize_ahead(job, tokens, k, next);
    const bool normed = run_mma(x, tokens, k, job);
    launched("matmul");
    if (normed) rounded_ = {y, tokens, w.dim(0), launches_, job.next_x, job.next_norm, job.next_eps};
  }

  // GGUF blocks (quant.cuh): x rounded to 8 bits into quant_scratch_, then the integer products.
  // (Not again when the last launch left x rounded that way: quant_rounded_.)
  void launch_quant(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y,
                    bool accumulate) {
    const QuantRounded& r = quant_rounded_;
    const bool rounded = r.x == x && r.tokens == tokens && r.k == w.dim(1) && r.after == launches_ &&
                         r.block_elements == dtype_block_elements(w.dtype);
    void* scratch = quant_scratch(tokens, w.dim(1));
    if (!rounded) cuda::quant_round(stream_, x, tokens, w.dim(1), w.dtype, scratch);
    const cuda::QuantJob job = quant_job(w, bias, y);
    cuda::quant_products(stream_, tokens, w.dim(1), w.dtype, {&job, 1}, accumulate, scratch);
    launched("quant_matmul");
  }

  // The scratch for x [tokens, k] rounded to 8 bits (grown before the rounding that fills it).
  void* quant_scratch(int64_t tokens, int64_t k) {
    void* scratch = grow(quant_scratch_, cuda::quant_scratch_bytes(tokens, k), "quantized activations");
    select();
    return scratch;
  }

  static cuda::QuantJob quant_job(const TensorView& w, const TensorView& bias, float* y) {
    TS_CHECK(w.shape.size() == 2, "matmul weight shape ", shape_string(w.shape));
    TS_CHECK(bias.empty() || (bias.dtype == DType::kF32 && bias.numel() == w.dim(0)), "bias ", dtype_name(bias.dtype),
             " ", shape_string(bias.shape), " for ", w.dim(0), " rows of blocks");
    return {w.data, w.dim(0), static_cast<const float*>(bias.data), y};
  }

  // Several matmuls of one x on GGUF blocks: x is rounded once for each run of
  // weights that take the same rounding (quant_same_rounding), not once a matmul.
  void quant_matmuls(const float* x, int64_t tokens, std::span<const Projection> outs, const RowNorm& norm) {
    const int64_t k = outs[0].w->dim(1);
    cuda::QuantNorm fold;  // the norm, applied by the rounding as rms_norm applies it
    if (norm.weight != nullptr) {
      TS_CHECK(norm.weight->numel() == k, "norm weight ", shape_string(norm.weight->shape), " for dim ", k);
      fold = {norm.weight->data, norm.weight->dtype, norm.eps};
    }
    void* scratch = quant_scratch(tokens, k);
    for (size_t i = 0, end = 0; i < outs.size(); i = end) {
      if (i == 0 || !cuda::quant_same_rounding(outs[i].w->dtype, outs[i - 1].w->dtype))
        cuda::quant_round(stream_, x, tokens, k, outs[i].w->dtype, scratch, fold);
      // The run of weights in outs[i]'s dtype: one launch.
      cuda::QuantJob jobs[cuda::kMaxQuantJobs];
      for (end = i; end < outs.size() && end - i < cuda::kMaxQuantJobs && outs[end].w->dtype == outs[i].w->dtype; ++end)
        jobs[end - i] = quant_job(*outs[end].w, *outs[end].bias, outs[end].y);
      cuda::quant_products(stream_, tokens, k, outs[i].w->dtype, {jobs, end - i}, false, scratch);
      launched("quant_matmul");
    }
  }

  // The x that `job` reads: x itself, normalized by the matmul (a bf16 norm
  // weight, when mma_norm_fits: the decode kernel as it loads, the tiled one as
  // it rounds x to bf16), or normalized into norm.scratch first.
  const float* normalize(const float* x, int64_t tokens, int64_t k, const RowNorm& norm, cuda::MmaJob& job) {
    select();
    if (norm.weight == nullptr) return x;
    TS_CHECK(norm.weight->numel() == k, "norm weight ", shape_string(norm.weight->shape), " for k ", k);
    if (norm.weight->dtype == DType::kBF16 && cuda::mma_norm_fits(tokens, k)) {
      job.norm = static_cast<const __nv_bfloat16*>(norm.weight->data);
      job.eps = norm.eps;
      return x;
    }
    rms_norm(x, tokens, k, *norm.weight, norm.eps, norm.scratch);
    return norm.scratch;
  }

  // The tensor-core kernel for a few tokens, the tiled one for many: the same sums.
  // Returns whether it wrote job.next_x (mma_gemm's).
  bool run_mma(const float* x, int64_t tokens, int64_t k, cuda::MmaJob job) {
    if (tokens < cuda::mma_gemm_min_tokens()) {
      cuda::mma_matmul(stream_, x, tokens, k, job);
      return false;
    }
    const bool rounded = rounded_.x == x && rounded_.tokens == tokens && rounded_.width == k &&
                         rounded_.after == launches_ && rounded_.norm == job.norm &&
                         (job.norm == nullptr || rounded_.eps == job.eps);
    if (rounded) job.norm = nullptr;  // rounded_ holds x normalized by it
    void* scratch = grow(gemm_scratch_, cuda::mma_gemm_scratch(tokens, k, job), "matmul scratch");
    return cuda::mma_gemm(stream_, x, tokens, k, job, scratch, rounded ? rounded_.data : nullptr);
  }

  static void check_weight(const TensorView& w, const TensorView& bias) {
    TS_CHECK(w.shape.size() == 2, "matmul weight shape ", shape_string(w.shape));
    TS_CHECK(bias.empty() || bias.numel() == w.dim(0), "bias ", shape_string(bias.shape), " for ", w.dim(0), " rows");
    TS_CHECK(bias.empty() || bias.dtype == w.dtype, "bias dtype ", dtype_name(bias.dtype));
  }

  static void add_to_job(cuda::MmaJob& job, int slot, const TensorView& w, const TensorView& bias, float* y) {
    job.w[slot] = static_cast<const __nv_bfloat16*>(w.data);
    job.bias[slot] = static_cast<const __nv_bfloat16*>(bias.data);
    job.y[slot] = y;
    job.n[slot] = w.dim(0);
  }

  static void check_blocks(const KvPages& pages, std::span<const int32_t> blocks, int64_t positions) {
    TS_CHECK(positions <= static_cast<int64_t>(blocks.size()) * pages.block_size, "positions up to ", positions, " in ",
             blocks.size(), " blocks");
    for (const int32_t block : blocks)
      TS_CHECK(block >= 0 && block < pages.blocks, "block ", block, " of ", pages.blocks);
  }

  // The TokenMap of the parts' tokens, staged on the device: every token's
  // position, then where its block table starts, then the tables (with_tables).
  cuda::TokenMap map(std::span<const SeqSlice> parts, bool with_tables, const KvPages* pages = nullptr) {
    std::vector<int32_t>& m = map_host_;
    m.clear();
    int64_t tokens = 0;
    for (const SeqSlice& part : parts) {
      if (with_tables) check_blocks(*pages, part.blocks, part.pos0 + part.tokens);
      for (int64_t t = 0; t < part.tokens; ++t) m.push_back(static_cast<int32_t>(part.pos0 + t));
      tokens += part.tokens;
    }
    int32_t table = 0;
    for (const SeqSlice& part : parts) {
      for (int64_t t = 0; t < part.tokens; ++t) m.push_back(table);
      if (with_tables) table += static_cast<int32_t>(part.blocks.size());
    }
    if (with_tables)
      for (const SeqSlice& part : parts) m.insert(m.end(), part.blocks.begin(), part.blocks.end());
    const int32_t* staged = stage(m);
    return {staged, staged + tokens, with_tables ? staged + 2 * tokens : nullptr};
  }

  // Attention for the parts' tokens, in slices of tokens whose partial outputs fit
  // the scratch budget (slicing changes no token's result), or in one launch when
  // its blocks take the whole (they need no scratch). With `rounded` (tensor cores
  // only), out is written rounded to bf16 there too.
  void run_attention(const float* q, float* out, int64_t n_heads, const KvPages& p, int64_t layer,
                     std::span<const SeqSlice> parts, cuda::TokenMap all, int64_t window, float scale,
                     __nv_bfloat16* rounded = nullptr) {
    const int64_t row_floats = n_heads * (p.head_dim + 2);  // one partition of one token
    int64_t begin = 0;                                      // the first token of the slice, over all parts
    int64_t partitions = 0, tokens = 0;
    const bool tensor_cores = cuda::mma_attention_fits(p, n_heads, window);
    const int64_t per_block = tensor_cores ? cuda::mma_attention_tokens_per_block(n_heads, p.n_kv_heads) : 1;
    // Blocks that take the whole write out themselves, without scratch: one launch for every token.
    const bool whole = tensor_cores && takes_whole(parts, per_block, p.n_kv_heads, p.head_dim);
    // Tensor cores: the slice's tokens in blocks of one sequence's tokens each.
    std::vector<cuda::ColumnBlock>& column_blocks = column_blocks_;
    column_blocks.clear();
    int64_t part_first = 0;  // the current part's first token, over all parts
    const auto flush = [&] {
      if (tokens == 0) return;
      float* scratch = whole ? nullptr : attention_scratch(static_cast<size_t>(tokens * partitions * row_floats));
      const cuda::TokenMap slice{all.pos + begin, all.table + begin, all.tables};
      const float* q_slice = q + begin * n_heads * p.head_dim;
      float* out_slice = out + begin * n_heads * p.head_dim;
      if (tensor_cores) {
        const auto* blocks = reinterpret_cast<const cuda::ColumnBlock*>(
            stage({reinterpret_cast<const int32_t*>(column_blocks.data()), column_blocks.size() * 3}));
        cuda::mma_attention(stream_, q_slice, n_heads, p, layer, slice, scale, partitions, blocks,
                            static_cast<int64_t>(column_blocks.size()), tokens, scratch, out_slice,
                            rounded != nullptr ? rounded + begin * n_heads * p.head_dim : nullptr);
        column_blocks.clear();
      } else {
        cuda::attention(stream_, q_slice, out_slice, tokens, n_heads, p, layer, slice, window, scale, partitions,
                        scratch);
      }
      launched("attention");
      begin += tokens;
      tokens = partitions = 0;
    };
    for (const SeqSlice& part : parts) {
      for (int64_t t = 0; t < part.tokens; ++t) {
        const int64_t pos = part.pos0 + t;
        const int64_t visible = window > 0 ? std::min(window, pos + 1) : pos + 1;
        const int64_t need = std::max(partitions, cuda::attention_partitions(visible));
        if (!whole && tokens > 0 && (tokens + 1) * need * row_floats > kAttentionScratchFloats) flush();
        partitions = std::max(partitions, cuda::attention_partitions(visible));
        // A new block at the part's first token, every per_block tokens, and after a flush.
        const int64_t in_slice = part_first + t - begin;
        if (tensor_cores) {
          if (t == 0 || column_blocks.empty() || column_blocks.back().tokens == per_block)
            column_blocks.push_back({static_cast<int32_t>(in_slice), 0, static_cast<int32_t>(part.pos0)});
          ++column_blocks.back().tokens;
        }
        ++tokens;
      }
      part_first += part.tokens;
    }
    flush();
  }

  // Whether mma_attention takes the whole for the parts' tokens in one launch.
  static bool takes_whole(std::span<const SeqSlice> parts, int64_t per_block, int64_t n_kv_heads, int64_t head_dim) {
    int64_t tokens = 0, blocks = 0, partitions = 0;
    for (const SeqSlice& part : parts) {
      tokens += part.tokens;
      blocks += (part.tokens + per_block - 1) / per_block;
      partitions = std::max(partitions, cuda::attention_partitions(part.pos0 + part.tokens));
    }
    return cuda::mma_attention_whole(partitions, blocks, tokens, n_kv_heads, head_dim);
  }

  float* attention_scratch(size_t floats) {
    return static_cast<float*>(grow(attention_scratch_, floats * sizeof(float), "attention scratch"));
  }

  // `scratch`, grown to at least `bytes` (16 MiB at least) once the work queued
  // before has finished with it.
  void* grow(Buffer& scratch, size_t bytes, const char* what) {
    if (scratch.bytes() < bytes) {
      drain(what);
      scratch = Buffer();
      auto buffer = alloc(std::max(bytes, size_t{16} << 20));
      TS_CHECK(buffer.ok(), what, ": ", buffer.status().to_string());
      scratch = std::move(*buffer);
    }
    return scratch.data();
  }

  // Returns a device copy of a small host span (token ids, a block table). Copies
  // go into an arena, pinned on the host and mirrored on the device, through
  // queued async copies, so the host never waits for the GPU here. A span staged
  // before and unchanged (a sequence's block table, once per layer) is found by
  // its contents and not copied again. A full arena is reused once the stream has
  // drained, which is the only wait.
  const int32_t* stage(std::span<const int32_t> host) {
    select();
    if (host.empty()) return nullptr;
    const std::vector<int32_t> key(host.begin(), host.end());
    if (const auto it = staged_.find(key); it != staged_.end()) return arena_device() + it->second;
    if (arena_used_ + host.size() > arena_capacity_ || staged_.size() >= kMaxStaged) {
      drain("the work before reusing the staging arena");
      staged_.clear();
      arena_used_ = 0;
      if (host.size() > arena_capacity_) grow_arena(host.size());
    }
    const size_t at = arena_used_;
    std::copy(host.begin(), host.end(), arena_host_ + at);
    check(cudaMemcpyAsync(arena_device() + at, arena_host_ + at, host.size_bytes(), cudaMemcpyHostToDevice, stream_),
          "staging ids or a block table");
    arena_used_ += host.size();
    staged_.emplace(key, at);
    return arena_device() + at;
  }

  // Ends a recording begun by begin_step() and runs it (nothing when none is open).
  void run_recorded() {
    if (!recording_) return;
    recording_ = false;
    cudaGraph_t graph = nullptr;
    check(cudaStreamEndCapture(stream_, &graph), "recording a step");
    size_t nodes = 0;
    check(cudaGraphGetNodes(graph, nullptr, &nodes), "counting a step's launches");
    if (nodes > 0) {
      if (execs_.size() >= kMaxGraphs && !execs_.contains(nodes)) forget_graphs();
      cudaGraphExec_t& exec = execs_[nodes];
      if (exec != nullptr) {
        cudaGraphExecUpdateResultInfo info{};
        if (cudaGraphExecUpdate(exec, graph, &info) != cudaSuccess) {  // another kernel, or other dependencies
          cudaGetLastError();
          cudaGraphExecDestroy(exec);
          exec = nullptr;
        }
      }
      if (exec == nullptr) check(cudaGraphInstantiate(&exec, graph, 0), "instantiating a step's graph");
      check(cudaGraphLaunch(exec, stream_), "launching a step's graph");
      ++graph_steps_;
    }
    check(cudaGraphDestroy(graph), "freeing a step's recording");
  }

  void forget_graphs() {
    check(cudaStreamSynchronize(stream_), "the graphs' last launches");
    for (const auto& [nodes, exec] : execs_) cudaGraphExecDestroy(exec);
    execs_.clear();
  }

  // Runs what is recorded, then waits for the stream.
  void drain(const char* what) {
    run_recorded();
    check(cudaStreamSynchronize(stream_), what);
  }

  void grow_arena(size_t elements) {
    arena_capacity_ = std::max<size_t>(elements, kArenaElements);
    if (arena_host_ != nullptr) cudaFreeHost(arena_host_);
    check(cudaMallocHost(&arena_host_, arena_capacity_ * sizeof(int32_t)), "allocating the pinned staging arena");
    auto buffer = alloc(arena_capacity_ * sizeof(int32_t));
    TS_CHECK(buffer.ok(), buffer.status().to_string());
    arena_ = std::move(*buffer);
  }

  int32_t* arena_device() const { return static_cast<int32_t*>(arena_.data()); }

  struct SpanHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      size_t h = v.size();
      for (const int32_t x : v) h = h * 1000003u ^ static_cast<uint32_t>(x);
      return h;
    }
  };
  static constexpr size_t kArenaElements = size_t{1} << 20;  // 4 MiB
  static constexpr size_t kMaxStaged = 4096;

  int ordinal_;
  std::string name_;
  cudaStream_t stream_;
  // Partial outputs of attention, at most this many floats (256 MiB) unless one token needs more.
  static constexpr int64_t kAttentionScratchFloats = int64_t{64} << 20;

  std::vector<Buffer> placed_;  // the weights place() copied here
  Buffer attention_scratch_;
  std::vector<cuda::ColumnBlock> column_blocks_;  // run_attention's, kept to reuse its memory
  Buffer quant_scratch_;                          // launch_quant's rounded activations
  Buffer gemm_scratch_;                           // the tiled matmul's: x rounded to bf16, the sums of a split
  Buffer rounded_buffer_;                         // rounded_for's for outputs
  Buffer normed_buffer_;                          // and for normalize_ahead's, which the next output may not overwrite
  struct Rounded {
    const float* x = nullptr;  // the values `data` holds rounded (normalized by `norm` first, when it is set)
    int64_t tokens = 0, width = 0;
    uint64_t after = 0;  // launches_ when they were written
    const __nv_bfloat16* data = nullptr;
    const __nv_bfloat16* norm = nullptr;
    float eps = 0.0f;
  } rounded_;
  // x [tokens, k] as gate_up left it rounded in quant_scratch_ for weights of
  // block_elements (the gate's rounding) after `after` launches.
  struct QuantRounded {
    const float* x = nullptr;
    int64_t tokens = 0, k = 0, block_elements = 0;
    uint64_t after = 0;
  } quant_rounded_;
  uint64_t launches_ = 0;  // every launch and copy on the stream, counted
  std::vector<int32_t> map_host_;
  // The staging arena (see stage()).
  Buffer arena_;
  int32_t* arena_host_ = nullptr;
  size_t arena_capacity_ = 0, arena_used_ = 0;
  std::unordered_map<std::vector<int32_t>, size_t, SpanHash> staged_;
  // Decode steps as graphs (begin_step): the executable graphs by their node count.
  static constexpr size_t kMaxGraphs = 16;
  bool graphs_;
  bool recording_ = false;
  std::unordered_map<size_t, cudaGraphExec_t> execs_;
  int64_t graph_steps_ = 0;
  // TESSERA_CUDA_PROFILE_STEPS and _FROM (see the top of this file), and the decode steps begun.
  const int64_t profile_steps_ = count_in("TESSERA_CUDA_PROFILE_STEPS");
  const int64_t profile_from_ = std::max<int64_t>(1, count_in("TESSERA_CUDA_PROFILE_FROM", 2));
  int64_t decode_steps_ = 0;

  // ---- Mixture of experts (moe.cu): routing and a layer's experts without the host.
 public:
  bool route_experts(const float* logits, int64_t tokens, const ExpertRouting& routing, const TensorView& bias,
                     int32_t* experts, float* weights) override {
    if (routing.experts > cuda::kMaxRoutedExperts) return false;  // the caller routes on the host
    TS_CHECK(bias.empty() || bias.numel() == routing.experts, "router bias ", shape_string(bias.shape), " for ",
             routing.experts, " experts");
    select();
    cuda::route_experts(stream_, logits, tokens, routing, bias.empty() ? nullptr : bias.data, bias.dtype, experts,
                        weights);
    launched("route_experts");
    return true;
  }

  bool run_experts(const float* x, int64_t tokens, const ExpertRouting& routing, int32_t* experts, float* weights,
                   const ExpertWeights& w, float* out, const ExpertStep& step) override {
    if (step.logits != nullptr && routing.experts > cuda::kMaxRoutedExperts) return false;  // routed on the host
    const cuda::ExpertTable& table = expert_table(w);
    TS_CHECK(table.experts == routing.experts, table.experts, " experts' weights for ", routing.experts);
    void* scratch = grow(experts_.scratch, cuda::experts_scratch(tokens, routing.top_k, table), "expert scratch");
    const bool bias = step.bias != nullptr && !step.bias->empty();
    TS_CHECK(!bias || step.bias->numel() == routing.experts, "router bias ", shape_string(step.bias->shape));
    // x's norm: in the experts' and the router's launches (a lone bf16 token), else into its scratch first.
    const RowNorm& norm = step.norm;
    TS_CHECK(norm.weight == nullptr || norm.weight->numel() == table.hidden, "norm weight ",
             norm.weight != nullptr ? shape_string(norm.weight->shape) : "", " for hidden ", table.hidden);
    const bool normed =
        norm.weight != nullptr && cuda::experts_norm_fits(tokens, routing.top_k, table, norm.weight->dtype);
    if (norm.weight != nullptr && !normed) {
      rms_norm(x, tokens, table.hidden, *norm.weight, norm.eps, norm.scratch);
      x = norm.scratch;
    }
    // Given the router: a lone token's logits come from the routing's launch, others' from matmul.
    const TensorView* r = step.router;
    TS_CHECK(
        r == nullptr || (step.logits != nullptr && r->shape == std::vector<int64_t>{routing.experts, table.hidden}),
        "router ", r != nullptr ? shape_string(r->shape) : "", " for ", routing.experts, " experts");
    const bool fused = r != nullptr && cuda::router_fits(tokens, *r, routing, normed);
    if (r != nullptr && !fused && normed) {  // the decode matmul's normalizing job
      static const TensorView kNoBias{};
      const Projection logits{r, &kNoBias, step.logits};
      matmuls(x, tokens, {&logits, 1}, norm);
    } else if (r != nullptr && !fused) {
      matmul(x, tokens, *r, {}, step.logits);
    }
    const cuda::RouterOutput router{step.logits, bias ? step.bias->data : nullptr,
                                    bias ? step.bias->dtype : DType::kF32, fused ? r->data : nullptr};
    select();
    cuda::run_experts(stream_, x, tokens, routing, router, experts, weights, table, scratch, out, step.add,
                      {.weight = normed ? norm.weight->data : nullptr, .eps = norm.eps});
    launched("run_experts");
    return true;
  }

 private:
  // The layer's table of expert weight pointers in device memory, made on its first step.
  const cuda::ExpertTable& expert_table(const ExpertWeights& w) {
    TS_CHECK(!w.gate.empty() && w.up.size() == w.gate.size() && w.down.size() == w.gate.size(),
             "experts: ", w.gate.size(), " gate, ", w.up.size(), " up, ", w.down.size(), " down");
    const auto found = experts_.layers.find(w.gate[0].data);
    if (found != experts_.layers.end()) return found->second.table;
    const TensorView& first = w.gate[0];
    TS_CHECK(first.shape.size() == 2, "expert weight ", shape_string(first.shape));
    const int64_t inter = first.dim(0), hidden = first.dim(1);
    const size_t n = w.gate.size();
    std::vector<const void*> pointers(3 * n + 1);  // and a null: the router's counter (moe.cuh), zero
    const auto expect = [&](const TensorView& view, int64_t rows, int64_t cols, size_t e) {
      const bool alike = view.dtype == first.dtype && view.shape == std::vector<int64_t>{rows, cols};
      TS_CHECK(alike, "expert ", e, ": ", dtype_name(view.dtype), " ", shape_string(view.shape), " beside ",
               dtype_name(first.dtype), " ", shape_string(first.shape));
    };
    for (size_t e = 0; e < n; ++e) {
      expect(w.gate[e], inter, hidden, e);
      expect(w.up[e], inter, hidden, e);
      expect(w.down[e], hidden, inter, e);
      pointers[e] = w.gate[e].data;
      pointers[n + e] = w.up[e].data;
      pointers[2 * n + e] = w.down[e].data;
    }
    auto buffer = alloc(pointers.size() * sizeof(void*));
    TS_CHECK(buffer.ok(), "expert table: ", buffer.status().to_string());
    upload(pointers.data(), pointers.size() * sizeof(void*), buffer->data());
    drain("copying an expert table");  // `pointers` goes out of scope
    const auto* table = static_cast<const void* const*>(buffer->data());
    auto* counter = reinterpret_cast<unsigned*>(static_cast<char*>(buffer->data()) + 3 * n * sizeof(void*));
    cuda::ExpertState::Layer layer{std::move(*buffer), cuda::ExpertTable{.gate = table,
                                                                         .up = table + n,
                                                                         .down = table + 2 * n,
                                                                         .dtype = first.dtype,
                                                                         .experts = static_cast<int64_t>(n),
                                                                         .hidden = hidden,
                                                                         .inter = inter,
                                                                         .counter = counter}};
    return experts_.layers.emplace(w.gate[0].data, std::move(layer)).first->second.table;
  }

  cuda::ExpertState experts_;
};

}  // namespace

Result<std::unique_ptr<Device>> make_cuda_device(int ordinal) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::unsupported(std::string("[cuda] no CUDA device: ") +
                               (error != cudaSuccess ? cudaGetErrorString(error) : "none found"));
  }
  if (ordinal < 0 || ordinal >= count)
    return Status::invalid_input("[cuda] no device cuda:" + std::to_string(ordinal) + " (this machine has " +
                                 std::to_string(count) + ")");
  check(cudaSetDevice(ordinal), "selecting the device");
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, ordinal), "reading the device's properties");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a stream");
  return std::unique_ptr<Device>(std::make_unique<CudaDevice>(
      ordinal, "cuda:" + std::to_string(ordinal) + " (" + props.name + ", " + gib(props.totalGlobalMem) + ")", stream));
}

}  // namespace tessera
