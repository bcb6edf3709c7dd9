// The tokenizer of a GGUF file (`tokenizer.ggml.*` metadata), as the
// tokenizer.json it stands for, so that Tokenizer::from_gguf runs the same BPE,
// pre-tokenizers and decoders as a Hugging Face file (no second tokenizer).
//
//   tokenizer.ggml.model "gpt2"   byte-level BPE: tokens + merges; the
//       pre-tokenizer regexes of `tokenizer.ggml.pre` are llama.cpp's
//       (src/llama-vocab.cpp, llm_tokenizer_bpe), each a Split (Isolated) before
//       ByteLevel; "llama-bpe"/"llama3" ignore merges for whole-vocabulary words,
//       as llama.cpp does.
//   tokenizer.ggml.model "llama"  SentencePiece BPE with byte fallback: "▁" for
//       spaces, a "▁" prefix unless tokenizer.ggml.add_space_prefix is false, and
//       merges derived from the scores (a pair merges with the score of the piece
//       it makes, highest first), as transformers converts a GGUF vocabulary.
//   Control tokens (type 3) are special added tokens, user-defined ones (type 4)
//   added tokens matched in any text, as llama.cpp's parse_special does.
//   A BOS is added when tokenizer.ggml.add_bos_token says so (default: true for
//   "llama", false for "gpt2").
// Other models (bert, t5, rwkv, ...) and pre-tokenizers are kUnsupported naming
// them; malformed metadata is kInvalidInput naming the key.
//
// Pure function; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/gguf.h"

namespace tessera {

// tokenizer.json text for `metadata`'s tokenizer.
Result<std::string> gguf_tokenizer_json(const GgufMetadata& metadata);

// What a GGUF file holds for chat, as tokenizer_config.json holds it for a
// checkpoint directory: tokenizer.chat_template (empty when absent), the text of
// the BOS and EOS tokens as the template's bos_token / eos_token, and the ids
// that end a generation (tokenizer.ggml.eos_token_id, eot_token_id and
// eom_token_id, each checked against the vocabulary).
struct GgufChat {
  std::string chat_template;
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  std::vector<int32_t> stop_ids;  // sorted, unique
};
Result<GgufChat> gguf_chat(const GgufMetadata& metadata);

}  // namespace tessera
