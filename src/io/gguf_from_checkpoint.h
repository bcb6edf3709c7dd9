// A Hugging Face checkpoint directory seen as the GGUF that llama.cpp's converter
// (convert_hf_to_gguf.py) makes of it, for `tessera quantize --model HF_DIR`: the
// metadata keys, the tensors under llama.cpp's names and in its layout, and
// their values as f32 rows to quantize. It is the inverse of io/gguf_model.h.
//
// Architectures (config.json model_type -> general.architecture):
//   llama, mistral -> llama   q and k rows (and biases) permuted from the
//                             half-split rotary layout to interleaved pairs, as
//                             LlamaModel.permute does; llama3 rope scaling
//                             becomes a rope_freqs tensor (F32)
//   qwen2 -> qwen2, qwen3 -> qwen3   no permutation
// Any other model_type, a rope type other than default, linear and llama3, or a
// tensor these layouts lack is kUnsupported naming it. Keys: block_count,
// context_length, embedding_length, feed_forward_length, attention.head_count(_kv),
// rope.scaling.{type,factor} (linear), rope.freq_base,
// attention.layer_norm_rms_epsilon, attention.{key,value}_length (when config.json
// has head_dim), vocab_size and rope.dimension_count (llama), in the converter's
// order after general.architecture and general.name, then the tokenizer (io/gguf_hf_vocab.h; a checkpoint with no
// tokenizer.json gets tokenizer.ggml.model "none", the converter's
// _set_vocab_none, with a note on stderr).
//
// Values: the checkpoint's f32, f16 or bf16 elements widened to f32 (exact), so
// quantizing them gives what llama-quantize gives on the converter's file of the
// checkpoint's own dtype (or f32). The llama3 factors are computed in double, as
// tools/llama_cpp_peer/tessera_to_gguf.py does; the converter computes them with
// torch in f32, so a factor may differ from its in the last bit.
//
// Immutable after open; rows() may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"
#include "io/gguf_hf_vocab.h"
#include "io/gguf_writer.h"

namespace tessera {

class CheckpointAsGguf {
 public:
  struct Tensor {
    std::string name = {};            // llama.cpp's: "blk.0.attn_q.weight"
    std::vector<uint64_t> dims = {};  // ggml's ne: row length first
    std::string hf_name = {};         // "" for a tensor made here (rope_freqs)
    int64_t permute_heads = 0;        // > 0: rows permuted in this many heads
    std::vector<float> values = {};   // a tensor made here
  };

  static Result<CheckpointAsGguf> open(const std::string& dir);

  const std::string& architecture() const { return arch_; }
  int64_t block_count() const { return block_count_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // Sets every key but general.file_type and general.quantization_version (the
  // quantizer's to set).
  void write_metadata(GgufWriter& writer) const;
  // The f32 values of rows [begin, end) of tensors()[index] into out.
  void rows(size_t index, uint64_t begin, uint64_t end, std::vector<float>& out) const;

 private:
  std::string arch_;
  int64_t block_count_ = 0;
  std::shared_ptr<const Checkpoint> checkpoint_;
  std::vector<Tensor> tensors_;
  std::vector<std::function<void(GgufWriter&)>> keys_;  // in the converter's order
  std::optional<HfGgufVocab> vocab_;
};

}  // namespace tessera
