// Checkpoint: the tensors of a Hugging Face checkpoint directory, memory-mapped.
// Reads either `model.safetensors` or the shards listed by
// `model.safetensors.index.json` ({"weight_map": {tensor: shard file}}). Shards
// are opened when the checkpoint is opened; tensor bytes are touched only when a
// caller reads them, so a pipeline stage pages in only its own layers.
// A GGUF file (io/gguf_model.h) opens as a checkpoint too: its tensors under
// Hugging Face names. Immutable after open; readable from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/gguf_model.h"
#include "io/safetensors.h"

namespace tessera {

class Checkpoint {
 public:
  // dir: a directory holding model.safetensors or model.safetensors.index.json, or a GGUF file.
  static Result<Checkpoint> open(const std::string& dir);

  bool has(const std::string& name) const;
  // kNotFound naming the tensor and the checkpoint directory when absent.
  Result<TensorView> get(const std::string& name) const;
  // The file a tensor lives in, for error messages ("" when absent).
  std::string file_of(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;  // tensor name -> file
  std::shared_ptr<const GgufWeights> gguf_;              // set for a GGUF file (then files_ is empty)
};

}  // namespace tessera
