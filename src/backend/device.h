// Device: the memory and the operations a forward pass needs, implemented once
// per backend (cpu/ now; cuda/ slots in through make_cuda_device, which
// no_cuda.cpp stubs out in builds without CUDA). The model code calls only this
// interface.
//
// Memory belongs to the device. Activations, scratch and KV pages are Buffers the
// device allocates (alloc); weights are placed where it computes (place). Every
// pointer a kernel takes is device memory; bytes cross to the host only through
// upload and download, at the edges of a forward pass (token ids in, logits or
// hidden states out). Token ids and block tables are small host spans that a
// device copies in itself.
//
// Activations are f32 and row-major; weights are TensorViews in f32, bf16 or f16,
// shaped as in the checkpoint (a Linear is [out, in]). KV pages hold f32, bf16 or
// f16 in the KvPages layout below.
//
// Threading: a Device belongs to one inference thread; calls are not concurrent.
// Results are deterministic: the same inputs give bitwise the same outputs
// whatever the thread count's timing, and each output row depends only on its own
// inputs, never on how many other rows share the call (batch invariance).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "backend/buffer.h"
#include "backend/expert_routing.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

// The KV pages of one pool, as kernels see them: `blocks` fixed-size blocks of
// `block_size` positions, each holding every layer's keys and values:
//   dtype [blocks, layers, 2 (k, v), n_kv_heads, block_size, head_dim]
// so one head's positions within a block are one contiguous region, rows in position
// order unless the device's kernels load them otherwise (the CPU's AMX attention keeps a
// bf16 cache's keys and values in tile layouts: cpu::amx::store_key, store_value). Only the
// device that wrote a region reads it; blocks are copied whole.
struct KvPages {
  void* base = nullptr;  // device memory
  DType dtype = DType::kF32;
  int64_t blocks = 0;
  int64_t block_size = 0;
  int64_t layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;

  int64_t head_elements() const { return block_size * head_dim; }
  int64_t block_elements() const { return layers * 2 * n_kv_heads * head_elements(); }
  size_t block_bytes() const { return static_cast<size_t>(block_elements()) * dtype_size(dtype); }
  // Element offset of head `head`'s keys (kv 0) or values (kv 1) of `layer` in `block`.
  int64_t offset(int64_t block, int64_t layer, int kv, int64_t head) const {
    return (((block * layers + layer) * 2 + kv) * n_kv_heads + head) * head_elements();
  }
};

// How rope rotates each head of q or k: the first `dim` dimensions turn by the
// angle position * inv_freq[i] for pair i, the rest pass unchanged.
struct Rotary {
  const float* inv_freq = nullptr;  // f32 [dim / 2] (device memory)
  int64_t dim = 0;                  // 0: the whole head (partial rotary: GLM, Phi-4-mini)
  // Pair i is (i, i + dim / 2) (transformers' rotate_half), or (2i, 2i + 1) when
  // interleaved (GLM's layout).
  bool interleaved = false;
  float scaling = 1.0f;  // cos and sin multiplied by it (longrope's attention factor)
};

// One sequence's part of an attention call: its queries and where its keys and values are.
struct AttentionArgs {
  const float* q = nullptr;  // f32 [tokens, n_heads, head_dim], already rotated
  float* out = nullptr;      // f32 [tokens, n_heads, head_dim]
  const KvPages* pages = nullptr;
  int64_t layer = 0;                  // layer index within the pages
  std::span<const int32_t> blocks{};  // host: the sequence's block table; positions [0, pos0 + tokens) written
  int64_t tokens = 0;
  int64_t pos0 = 0;  // position of the first query token
  int64_t n_heads = 0;
  int64_t sliding_window = 0;  // 0: full causal; else a query sees the last `sliding_window` positions
  float scale = 1.0f;
};

// One sequence's share of a step, for Device::attend: its next `tokens` tokens at
// positions [pos0, pos0 + tokens).
struct SeqSlice {
  int64_t tokens = 0;
  int64_t pos0 = 0;
  std::span<const int32_t> blocks{};  // host: its block table, covering positions [0, pos0 + tokens)
};

// The attention of one layer for every sequence of a step (the parts' tokens
// follow each other in q, k, v and out, in the order of `parts`).
struct AttendArgs {
  float* q = nullptr;        // f32 [tokens, n_heads, head_dim]: rotated in place
  float* k = nullptr;        // f32 [tokens, n_kv_heads, head_dim]: rotated in place, then stored
  const float* v = nullptr;  // f32 [tokens, n_kv_heads, head_dim]
  float* out = nullptr;      // f32 [tokens, n_heads, head_dim]
  const KvPages* pages = nullptr;
  int64_t layer = 0;
  std::span<const SeqSlice> parts{};
  int64_t n_heads = 0;
  int64_t sliding_window = 0;
  float scale = 1.0f;
  Rotary rotary{};
  // longrope: a part whose positions reach past `long_after` (pos0 + tokens >
  // long_after) rotates its q and k with these frequencies instead of
  // rotary.inv_freq, as transformers does for the positions of one forward.
  const float* long_inv_freq = nullptr;
  int64_t long_after = 0;
};

// An RMSNorm of x's rows before Device::matmuls or gate_up read them: bitwise
// what rms_norm(x, tokens, K, *weight, eps, scratch) and then the call on
// scratch give (the default does exactly that; a GPU may normalize the rows as
// its matmul loads them, leaving scratch, f32 [tokens, K], unwritten). No
// weight: x is read as it is.
struct RowNorm {
  const TensorView* weight = nullptr;
  float eps = 0.0f;
  float* scratch = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string name() const = 0;
  // Bytes this device could still allocate: the host's available memory (the
  // default), or a GPU's free memory.
  virtual uint64_t available_memory() const;
  // FLOP/s of the instruction a bf16 matmul multiplies with, on registers alone
  // (a GPU's tensor cores), the limit prefill is measured against; 0 where a
  // device has no such measure (the CPU's bench measures its own).
  virtual double measure_bf16_peak() { return 0; }

  // Memory. alloc fails with kOverloaded naming the size when it does not fit.
  virtual Result<Buffer> alloc(size_t bytes) = 0;
  virtual void upload(const void* host, size_t bytes, void* dst) = 0;
  virtual void download(const void* src, size_t bytes, void* host) = 0;
  virtual void copy(const void* src, size_t bytes, void* dst) = 0;
  // A step's work as one unit: the calls between begin_step() and end_step()
  // may be recorded and then run together (a GPU replays them as one CUDA
  // graph, which saves the launches one by one), with bitwise the same results.
  // A download, upload or place() among them ends the unit there. The defaults
  // run every call as it comes.
  virtual void begin_step() {}
  virtual void end_step() {}
  // How many steps this device has run as one unit (for tests and benchmarks).
  virtual int64_t steps_as_graphs() const { return 0; }
  // Whether each call has done its work when it returns (the CPU's threads
  // compute in the call). A GPU's calls queue the work and return, so the host
  // can do other work while the device computes, until a download waits for it.
  virtual bool computes_in_calls() const { return false; }
  // A view of a weight in memory this device computes on: the CPU computes on the
  // mapped file itself; a GPU copies it into memory it owns and keeps it until the
  // device is destroyed.
  virtual Result<TensorView> place(const TensorView& host) = 0;

  // y [tokens, N] = x [tokens, K] * w [N, K]^T (+ bias [N] when bias is non-empty).
  virtual void matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) = 0;
  // y [rows, dim] = x / sqrt(mean(x^2) + eps) * weight, per row (y may equal x).
  virtual void rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& weight, float eps, float* y) = 0;
  // y [ids, hidden] = table[id] for each id (ids already checked < vocab).
  virtual void embed(const TensorView& table, std::span<const int32_t> ids, float* y) = 0;
  // Rotates x [tokens, heads, head_dim] in place at positions pos0.. as `rotary` says.
  virtual void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0, const Rotary& rotary) = 0;
  // Writes k and v f32 [tokens, n_kv_heads, head_dim] into `layer` of the pages at
  // positions [pos0, pos0 + tokens) of the sequence whose block table is `blocks`,
  // rounded to the pages' dtype.
  virtual void kv_store(const KvPages& pages, int64_t layer, std::span<const int32_t> blocks, int64_t pos0,
                        int64_t tokens, const float* k, const float* v) = 0;
  // Causal (optionally sliding-window) softmax attention with grouped KV heads over paged keys and values.
  virtual void attention(const AttentionArgs& args) = 0;
  // For each part: rope of its q and k at its positions, k and v stored into the
  // pages (kv_store), then attention. The default makes those calls part by part;
  // a GPU runs the whole step in a few launches.
  virtual void attend(const AttendArgs& args);
  // y += x [tokens, K] * w [N, K]^T (+ bias), bitwise what matmul into `scratch`
  // [tokens, N] then add gives (the default does exactly that; a GPU fuses them).
  // `next`, when it has a weight, is the norm with which the next call (matmuls or
  // gate_up) will read y: a GPU may normalize y's rows for it while it finishes
  // them, and that call, given the same norm, then reads them (the default ignores it).
  virtual void matmul_add(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* scratch,
                          float* y, const RowNorm& next = {});
  // Several matmuls of one x (q, k and v): each output bitwise what matmul gives
  // it (the default calls matmul for each; a GPU runs them in one launch).
  struct Projection {
    const TensorView* w = nullptr;
    const TensorView* bias = nullptr;
    float* y = nullptr;
  };
  virtual void matmuls(const float* x, int64_t tokens, std::span<const Projection> outs, const RowNorm& norm = {});
  // An attention block's q, k and v of x (qkv: into args.q, args.k and args.v),
  // then attend(args): bitwise what those two calls give (the default makes them;
  // a GPU rotates and stores a decode step's q and k as its matmul finishes them).
  virtual void project_attend(const float* x, int64_t tokens, std::span<const Projection, 3> qkv, const RowNorm& norm,
                              const AttendArgs& args);
  // Several matmuls of `tokens` rows each, outs[i] of its own xs[i] (a lone token's
  // experts' downs): each output bitwise what matmul gives it (the default calls
  // matmul for each).
  virtual void matmuls_each(int64_t tokens, std::span<const float* const> xs, std::span<const Projection> outs);
  // out [tokens, N] = silu(x * w_gate^T + b_gate) * (x * w_up^T + b_up), bitwise
  // what matmul, matmul and silu_mul give (the default; `up` is scratch [tokens, N]).
  virtual void gate_up(const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& b_gate,
                       const TensorView& w_up, const TensorView& b_up, float* up, float* out, const RowNorm& norm = {});
  // out[i] = silu(gate[i]) * up[i]
  virtual void silu_mul(const float* gate, const float* up, int64_t n, float* out) = 0;
  // out[i] = gelu_tanh(gate[i]) * up[i], GELU's tanh approximation
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (torch's approximate="tanh").
  virtual void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) = 0;
  // x[i] *= factor
  virtual void scale(float* x, int64_t n, float factor) = 0;
  // y[i] += x[i]
  virtual void add(const float* x, int64_t n, float* y) = 0;
  // Mixture of experts: gathers the tokens routed to one expert, and adds its
  // weighted outputs back. `rows` is a small host span (like a block table).
  // y [rows.size(), dim]: row r = row rows[r] of x.
  virtual void gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim, float* y) = 0;
  // Row rows[r] of y += scale[r] * row r of x [rows.size(), dim], for distinct
  // rows; scale f32 [rows.size()] in device memory.
  virtual void scatter_add_rows(const float* x, const float* scale, std::span<const int32_t> rows, int64_t dim,
                                float* y) = 0;
  // Mixture of experts without the host (model/moe.h). route_experts writes each
  // token's top_k experts and weights, int32 and f32 [tokens, top_k] in device
  // memory, from the router's logits [tokens, experts] as `routing` says
  // (`bias`: kSigmoidGroups' correction bias [experts], or empty), bitwise what
  // route_token gives on the host. run_experts then writes out [tokens, hidden]:
  // each token's sum over its experts, in ascending expert order, of weight *
  // down(silu(gate x) * up x) (product, then sum, each rounded to f32), each
  // expert's matmuls bitwise what matmul gives them, a token's row the same
  // whatever else shares the call. Given the router's logits (`step.logits`),
  // run_experts routes first itself, writing experts and weights as
  // route_experts does; given the router too (`step.router`), it first writes
  // those logits itself, bitwise matmul(x, tokens, router), or returns false
  // having done nothing. With `step.add` it adds the sum onto out (bitwise the
  // sum, then add()) instead of writing it. With `step.norm`, x's rows are
  // RMS-normalized first (bitwise rms_norm into norm.scratch and the call on it;
  // a GPU may normalize them as its kernels load them, leaving the scratch
  // unwritten; out may then be x itself). The defaults (the CPU) return false
  // having done nothing: the caller normalizes, routes on the host and runs the
  // experts through matmul, as before.
  struct ExpertWeights {
    std::span<const TensorView> gate{}, up{}, down{};  // [experts]: [inter, hidden], [inter, hidden], [hidden, inter]
  };
  struct ExpertStep {
    float* logits = nullptr;             // [tokens, experts]; null: experts and weights are given
    const TensorView* router = nullptr;  // [experts, hidden]: the logits are x's through it (null: given)
    const TensorView* bias = nullptr;    // route_experts' bias, with logits (null or empty: none)
    bool add = false;
    RowNorm norm{};  // x's RMSNorm (no weight: x as it is)
  };
  virtual bool route_experts(const float* /*logits*/, int64_t /*tokens*/, const ExpertRouting& /*routing*/,
                             const TensorView& /*bias*/, int32_t* /*experts*/, float* /*weights*/) {
    return false;
  }
  virtual bool run_experts(const float* /*x*/, int64_t /*tokens*/, const ExpertRouting& /*routing*/,
                           int32_t* /*experts*/, float* /*weights*/, const ExpertWeights& /*w*/, float* /*out*/,
                           const ExpertStep& /*step*/) {
    return false;
  }
  // Greedy choice: y[r] = the index of the largest of x [rows, n]'s row r, the
  // first one on a tie (std::max_element's answer for rows without NaN); y int32
  // [rows] in device memory. The default reads the rows to the host; a GPU
  // reduces them where they are, so that only the ids come back.
  virtual void argmax(const float* x, int64_t rows, int64_t n, int32_t* y);

 protected:
  // x itself, or its rows [tokens, k] normalized into norm.scratch (rms_norm).
  const float* normed(const float* x, int64_t tokens, int64_t k, const RowNorm& norm);
};

// The CPU backend; threads == 0 uses all hardware threads.
std::unique_ptr<Device> make_cpu_device(size_t threads);
// The CUDA backend, or kUnsupported in a build without CUDA (no_cuda.cpp).
Result<std::unique_ptr<Device>> make_cuda_device(int ordinal);
// Bytes read plus bytes written per second by copy() of 1 GiB within the device
// (best of 3 rounds of 10 copies): a GPU's memory limit. Needs 2 GiB free.
Result<double> measure_copy_bandwidth(Device& device);
// "cpu" or "cuda[:N]".
Result<std::unique_ptr<Device>> make_device(std::string_view name, size_t cpu_threads);
// The GPU a device name stands for: "cuda" is 0, "cuda:N" is N; nullopt for any other name.
std::optional<int> cuda_ordinal(std::string_view name);

}  // namespace tessera
