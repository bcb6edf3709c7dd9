#include "engine/text_stream.h"

#include <algorithm>

namespace tessera {

bool ends_incomplete_utf8(const std::string& text) {
  if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return true;
  // Walk back over continuation bytes to the lead byte of the last sequence.
  size_t continuation = 0;
  size_t i = text.size();
  while (i > 0 && (static_cast<uint8_t>(text[i - 1]) & 0xC0) == 0x80 && continuation < 4) {
    --i;
    ++continuation;
  }
  if (i == 0) return continuation > 0;
  const auto lead = static_cast<uint8_t>(text[i - 1]);
  const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  return continuation + 1 < length;
}

namespace {

// Where the text that follows the already-emitted `context` starts in `text`
// (the window's decode, one token longer). Usually `text` extends `context`.
// When the new token rewrites what was decoded before (a byte-fallback run that
// turned out invalid: "m" becomes two U+FFFD), what was emitted cannot be taken
// back; the stream goes on after as many characters as were emitted (as vLLM's
// incremental detokenizer does), rather than waiting forever for a prefix that
// never comes back.
size_t new_text_start(const std::string& text, const std::string& context) {
  if (text.starts_with(context)) return context.size();
  const auto is_lead = [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; };
  const auto characters = static_cast<size_t>(std::count_if(context.begin(), context.end(), is_lead));
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i)
    if (is_lead(text[i]) && seen++ == characters) return i;
  return text.size();
}

}  // namespace

TextStream::TextStream(Decode decode, std::vector<std::string> stop_strings)
    : decode_(std::move(decode)), stop_strings_(std::move(stop_strings)) {
  std::erase(stop_strings_, std::string());
}

std::string TextStream::push(int32_t id) {
  if (stopped_) return {};
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string context = decode_(all.subspan(prefix_, read_ - prefix_));
  const std::string text = decode_(all.subspan(prefix_));
  const size_t start = new_text_start(text, context);
  if (start >= text.size() || ends_incomplete_utf8(text)) return {};  // nothing complete yet: wait for the next token
  pending_ += text.substr(start);
  prefix_ = read_;
  read_ = ids_.size();
  return release();
}

std::string TextStream::release() {
  size_t stop_at = std::string::npos;
  for (const auto& stop : stop_strings_) stop_at = std::min(stop_at, pending_.find(stop));
  if (stop_at != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, stop_at);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that could still grow into a stop string.
  size_t hold = 0;
  for (const auto& stop : stop_strings_)
    for (size_t n = std::min(stop.size() - 1, pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, stop, 0, n) == 0) {
        hold = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  const std::span<const int32_t> all(ids_);
  const std::string context = decode_(all.subspan(prefix_, read_ - prefix_));
  const std::string text = decode_(all.subspan(prefix_));
  pending_ += text.substr(new_text_start(text, context));
  prefix_ = read_ = ids_.size();
  std::string out = std::move(pending_);
  pending_.clear();
  for (const auto& stop : stop_strings_) {
    const size_t at = out.find(stop);
    if (at != std::string::npos) {
      out.resize(at);
      stopped_ = true;
    }
  }
  return out;
}

}  // namespace tessera
