// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): ByteLevel (with its GPT-2
// regex, add_prefix_space, use_regex), Split (string or regex pattern; behaviors
// Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert),
// Metaspace (replacement, prepend_scheme always/first/never, split), Digits,
// Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit and Sequence, with
// Hugging Face's semantics. Any other type is refused with unsupported naming it.
//
// A pre-tokenizer turns pieces of normalized text into smaller pieces ("words");
// the model then encodes each word on its own. Empty pieces are dropped, as in HF.
//
// Immutable after make_pre_tokenizer; pre_tokenize() is safe from any thread.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::tok {

struct Piece {
  std::string text;
  // The piece begins at offset 0 of the original input (Metaspace's "first").
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenized sub-pieces, in order.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

// Builds the pre-tokenizer described by `config`; JSON null gives nullptr (none).
Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& config);

// The printable character GPT-2's byte-level alphabet uses for byte b, in UTF-8.
const std::string& byte_level_char(uint8_t b);
// Inverse of byte_level_char: the byte for a code point of the alphabet, or -1.
int byte_level_byte(char32_t c);

}  // namespace tessera::tok
