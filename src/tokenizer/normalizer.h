// Normalizers of tokenizer.json ("normalizer"): NFC, NFD, NFKC, NFKD, Lowercase,
// Replace (string or regex), Prepend, Strip and Sequence, with Hugging Face's
// semantics. Any other type is refused with unsupported naming it.
//
// HF normalizes each piece of text between added tokens on its own, so Prepend
// (for instance) applies to every such piece; the caller does the splitting.
//
// Immutable after make_normalizer; normalize() is safe from any thread.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/status.h"

namespace tessera::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8) in place.
  virtual Status normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `config`; JSON null gives nullptr (none).
Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& config);

}  // namespace tessera::tok
