// Device: the operations a forward pass needs, implemented once per backend
// (cpu/ now; cuda/ slots in through make_cuda_device, which no_cuda.cpp stubs
// out in builds without CUDA). The model code calls only this interface.
//
// Activations are f32 and row-major; weights are TensorViews in f32, bf16 or
// f16, shaped as in the checkpoint (a Linear is [out, in]). Pointers refer to
// memory the device can address (host memory for the CPU).
//
// Threading: a Device belongs to one inference thread; calls are not
// concurrent. Results are deterministic: the same inputs give bitwise the same
// outputs whatever the thread count's timing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

struct AttentionArgs {
  const float* q = nullptr;        // f32 [tokens, n_heads, head_dim], already rotated
  const float* k_cache = nullptr;  // f32 [capacity, n_kv_heads, head_dim], positions [0, pos0 + tokens) valid
  const float* v_cache = nullptr;  // same layout as k_cache
  float* out = nullptr;            // f32 [tokens, n_heads, head_dim]
  int64_t tokens = 0;
  int64_t pos0 = 0;  // position of the first query token
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t sliding_window = 0;  // 0: full causal; else a query sees the last `sliding_window` positions
  float scale = 1.0f;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string name() const = 0;

  // y [tokens, N] = x [tokens, K] * w [N, K]^T (+ bias [N] when bias is non-empty).
  virtual void matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) = 0;
  // y [rows, dim] = x / sqrt(mean(x^2) + eps) * weight, per row (y may equal x).
  virtual void rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& weight, float eps, float* y) = 0;
  // y [ids, hidden] = table[id] for each id (ids already checked < vocab).
  virtual void embed(const TensorView& table, std::span<const int32_t> ids, float* y) = 0;
  // Rotates x [tokens, heads, head_dim] in place (rotate-half layout) at positions pos0.., using
  // inv_freq [head_dim / 2].
  virtual void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0,
                    std::span<const float> inv_freq) = 0;
  // Causal (optionally sliding-window) softmax attention with grouped KV heads.
  virtual void attention(const AttentionArgs& args) = 0;
  // out[i] = silu(gate[i]) * up[i]
  virtual void silu_mul(const float* gate, const float* up, int64_t n, float* out) = 0;
  // y[i] += x[i]
  virtual void add(const float* x, int64_t n, float* y) = 0;
};

// The CPU backend; threads == 0 uses all hardware threads.
std::unique_ptr<Device> make_cpu_device(size_t threads);
// The CUDA backend, or kUnsupported in a build without CUDA (no_cuda.cpp).
Result<std::unique_ptr<Device>> make_cuda_device(int ordinal);
// "cpu" or "cuda[:N]".
Result<std::unique_ptr<Device>> make_device(std::string_view name, size_t cpu_threads);

}  // namespace tessera
