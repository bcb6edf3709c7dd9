// Post-processors of tokenizer.json ("post_processor"): TemplateProcessing (the
// single-sequence template, e.g. "<s> $A"), ByteLevel (offsets only: no change to
// ids), RobertaProcessing and BertProcessing (cls $A sep) and Sequence. They run
// only when special tokens are added (HF add_special_tokens=True). Other types
// are refused with unsupported naming them.
//
// Immutable after make_post_processor; process() is safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "core/status.h"

namespace tessera::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites the ids of one encoded sequence (BOS/EOS around it).
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

// Builds the post-processor described by `config`; JSON null gives nullptr (none).
Result<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& config);

}  // namespace tessera::tok
