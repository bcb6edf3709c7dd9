// Tokenizer: Hugging Face tokenizer.json, encode and decode with the ids HF's
// `tokenizers` library gives (its pipeline: added tokens -> normalizer ->
// pre-tokenizer -> BPE model -> post-processor; decoders for the way back).
//
// Supported (anything else is refused with kUnsupported naming the component,
// never silently different ids):
//   model           BPE (byte-level, or SentencePiece-style with byte_fallback)
//   normalizer      NFC NFD NFKC NFKD Lowercase Replace Prepend Strip Sequence
//   pre_tokenizer   ByteLevel Split Metaspace Digits Punctuation Whitespace
//                   WhitespaceSplit CharDelimiterSplit Sequence
//   post_processor  TemplateProcessing ByteLevel RobertaProcessing BertProcessing Sequence
//   decoder         ByteLevel Metaspace ByteFallback Fuse Strip Replace Sequence
//   truncation and padding must be null.
// Known gap: character classes (regex \p{..}, NFC tables) come from PCRE2 10.42
// (Unicode 14) and ICU 72 (Unicode 15); the reference uses Unicode 16. Text with
// characters assigned in Unicode 15/16 may get different ids.
//
// Thread safety: a Tokenizer is immutable after loading except for its word
// cache, which a mutex guards; encode() and decode() may be called from any
// thread. Copies share the loaded state and the cache. A call that finds the cache
// busy encodes without it (same ids, slower) rather than wait.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera {

class GgufMetadata;

struct EncodeOptions {
  // Text of special added tokens in the input becomes those tokens (HF's default).
  // False encodes it as plain text (HF split_special_tokens=True), so user text
  // cannot inject control tokens. Non-special added tokens are matched either way.
  bool parse_special = true;
  // Run the post-processor's template (BOS/EOS), as HF's add_special_tokens.
  bool add_special = true;
};

class Tokenizer {
 public:
  // Loads a tokenizer.json file.
  static Result<Tokenizer> from_file(const std::string& path);
  // Parses tokenizer.json text; `name` prefixes error messages.
  static Result<Tokenizer> from_json(std::string_view json_text, std::string_view name = "tokenizer.json");
  // The tokenizer of a GGUF file's tokenizer.ggml.* metadata (tokenizer/gguf_tokenizer.h).
  static Result<Tokenizer> from_gguf(const GgufMetadata& metadata, std::string_view name);

  // Token ids of UTF-8 `text`; invalid UTF-8 is refused (kInvalidInput).
  Result<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Text of `ids` through the decoder; an id that is neither in the vocabulary nor
  // an added token is refused (kInvalidInput). skip_special drops special tokens.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // Every valid id is below this bound (the vocabulary may have gaps).
  int32_t id_limit() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessera
