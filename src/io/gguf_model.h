// A GGUF model file read as a Hugging Face checkpoint: the metadata becomes the
// config.json it stands for, and the tensors are served under Hugging Face
// names, so that model/weights.cpp and the family files (model/arch/) read a
// GGUF exactly as they read a checkpoint directory (Checkpoint::open and
// load_model_config take a .gguf file too).
//
// Architectures (general.architecture) and what is mapped:
//   llama   model_type "llama" (Mistral GGUFs use it too). llama.cpp's converter
//           permutes the rows of q and k (and their biases) from the half-split
//           rotary layout to interleaved pairs; get() un-permutes them so that
//           rotate-half rope gives the same result. A rope_freqs tensor (llama3
//           rotary scaling) is turned back into its llama3 parameters and
//           checked to reproduce every factor.
//   qwen2   model_type "qwen2" (q/k/v biases); no permutation (llama.cpp's NEOX rope).
//   qwen3   model_type "qwen3" (q/k norms); no permutation.
// Any other architecture is kUnsupported naming it; a tensor that none of these
// layouts has is kUnsupported naming the tensor; a missing or mistyped key is
// kInvalidInput naming the key.
//
// Tensors are served in place from the map in their own type: F32, F16, BF16,
// and the quantized blocks (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K as DType kQ8_0 ..;
// the devices compute on them, so the model's memory is the file's size). q and
// k of llama are copied once, un-permuted (whole rows of blocks). A tensor's
// bytes are touched only when a caller asks for it, so a pipeline stage pages
// in only its own layers.
//
// Thread safety: immutable after open except the cache of materialized tensors,
// which a mutex guards; get() may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "core/tensor.h"
#include "io/gguf.h"

namespace tessera {

// llama.cpp's architecture for a config.json model_type ("mistral" -> "llama"),
// and whether its converter permutes q/k rows; nullopt when tessera maps none.
struct GgufArch {
  std::string name;
  bool permuted_qk = false;
};
std::optional<GgufArch> gguf_arch_for_model_type(std::string_view model_type);
// llama.cpp's name of a Hugging Face tensor ("model.layers.3.mlp.up_proj.weight" ->
// "blk.3.ffn_up.weight"), or "" when the architectures above have none.
std::string gguf_tensor_name(std::string_view hf_name);

// True when `path` is a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::string& path);

// The config.json (as Hugging Face writes it) that `file`'s metadata stands for.
Result<nlohmann::json> gguf_hf_config(const GgufFile& file);

class GgufWeights {
 public:
  static Result<std::shared_ptr<const GgufWeights>> open(const std::string& path);

  const GgufFile& file() const { return file_; }
  bool has(const std::string& hf_name) const { return tensors_.count(hf_name) != 0; }
  // kNotFound naming the tensor and the file when absent.
  Result<TensorView> get(const std::string& hf_name) const;
  std::vector<std::string> names() const;

 private:
  struct Source {
    const GgufTensorInfo* info = nullptr;
    int64_t permute_heads = 0;  // > 0: un-permute rows in this many heads (llama q/k)
  };
  explicit GgufWeights(GgufFile file) : file_(std::move(file)) {}

  GgufFile file_;
  std::map<std::string, Source> tensors_;  // Hugging Face name -> GGUF tensor
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::vector<uint8_t>> materialized_;  // guarded by mutex_; never erased
};

}  // namespace tessera
