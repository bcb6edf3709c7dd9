// Decoders of tokenizer.json ("decoder"): ByteLevel, Metaspace, ByteFallback,
// Fuse, Strip, Replace and Sequence, with Hugging Face's semantics: each works on
// the list of token strings (decode_chain) and the final text is their
// concatenation. Other types are refused with unsupported naming them.
//
// Immutable after make_decoder; decode_chain() is safe from any thread.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds the decoder described by `config`; JSON null gives nullptr (none).
Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& config);

}  // namespace tessera::tok
