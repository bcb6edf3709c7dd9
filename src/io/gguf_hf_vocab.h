// The tokenizer of a Hugging Face checkpoint as llama.cpp's converter
// (convert_hf_to_gguf.py: get_vocab_base, _set_vocab_gpt2, and gguf-py's
// SpecialVocab) writes it into a GGUF's tokenizer.ggml.* keys, so that
// `tessera quantize --model HF_DIR` makes a file that llama.cpp and tessera
// tokenize as the checkpoint does.
//
// What is read, from the checkpoint directory:
//   tokenizer.json         model (BPE, byte-level), vocab, merges, added_tokens,
//                          pre_tokenizer, post_processor
//   tokenizer_config.json  bos/eos/unk/sep/pad/cls/mask tokens, add_bos_token /
//                          add_eos_token, chat_template (optional file)
//   chat_template.jinja    the chat template, when tokenizer_config has none
//   config.json            *_token_id, for the special tokens not named above
// Only byte-level BPE (tokenizer.ggml.model "gpt2") is converted. llama.cpp's
// converter names the pre-tokenizer (tokenizer.ggml.pre) by hashing the ids of a
// check text, and refuses a tokenizer whose hash it has not registered; we
// recognize it from tokenizer.json itself: a lone ByteLevel with its regex is
// "gpt-2"; a Split by Llama 3's regex before a ByteLevel is "llama-bpe", by Qwen 2's
// "qwen2" (llama.cpp's regexes for these names split the same), each with the
// ignore_merges llama.cpp assumes for it. Any other pre-tokenizer, a normalizer
// other than NFC (Qwen's; llama.cpp applies none) or an empty Sequence, a
// SentencePiece tokenizer (tokenizer.model, byte_fallback) or a model that is not
// BPE is kUnsupported naming it.
//
// Pure functions of the files; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "io/gguf_writer.h"

namespace tessera {

struct HfGgufVocab {
  std::string model = "gpt2";  // tokenizer.ggml.model
  std::string pre;             // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // gguf-py's TokenType: 1 normal, 3 control, 4 user defined, 5 unused
  std::vector<std::string> merges;   // "a b"
  // (type, id) in SpecialVocab's order: "bos", "eos", "unk", "sep", "pad", "cls", "mask"
  std::vector<std::pair<std::string, uint32_t>> special_ids;
  std::vector<std::pair<std::string, bool>> add_special;  // ("bos", true), ...
  std::optional<std::string> chat_template;
};

// The vocabulary of the checkpoint in `dir` whose config says vocab_size; tokens
// beyond those the tokenizer defines are "[PAD<i>]" (unused), as the converter
// writes them. kNotFound when dir has no tokenizer.json; kInvalidInput or
// kUnsupported naming the file and what was wrong otherwise.
Result<HfGgufVocab> read_hf_gguf_vocab(const std::string& dir, int64_t vocab_size);

// Sets the tokenizer.ggml.* keys and tokenizer.chat_template.
void write_hf_gguf_vocab(const HfGgufVocab& vocab, GgufWriter& writer);

}  // namespace tessera
