// TextStream: turns generated token ids into text that is safe to show as it
// arrives. Decoding one token at a time is wrong for byte-level and
// byte-fallback vocabularies (a character can span tokens) and for
// SentencePiece-style spaces, so the stream decodes a short window of recent
// tokens and emits only the new suffix, and only once it ends in complete UTF-8
// (never a partial sequence, never a U+FFFD placeholder for bytes still to
// come). Stop strings are matched on the text, also across token boundaries;
// text that might be the start of a stop string is held back until it is
// known not to be. One TextStream per sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace tessera {

class TextStream {
 public:
  // decode: ids -> text, as the tokenizer decodes without special tokens.
  using Decode = std::function<std::string(std::span<const int32_t>)>;

  TextStream(Decode decode, std::vector<std::string> stop_strings);

  // Adds a generated token; returns the text now safe to emit (may be empty).
  std::string push(int32_t id);
  // Whether a stop string has appeared; text before it has been emitted, and push() emits nothing more.
  bool stopped() const { return stopped_; }
  // At the end of generation: whatever is still held back (an unfinished stop-string prefix or
  // an incomplete character, decoded as it stands).
  std::string finish();

 private:
  std::string release();

  Decode decode_;
  std::vector<std::string> stop_strings_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;    // ids_[prefix_, read_) were decoded as context for the next piece
  size_t read_ = 0;      // ids_[read_, end) are not yet emitted as text
  std::string pending_;  // decoded text held back for stop-string matching
  bool stopped_ = false;
};

// Whether `text` ends inside a UTF-8 sequence (or with U+FFFD, which decoders emit for such bytes).
bool ends_incomplete_utf8(const std::string& text);

}  // namespace tessera
