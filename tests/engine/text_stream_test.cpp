// TextStream with a toy byte vocabulary (token id = one byte), so characters
// span tokens as they do with byte-level BPE: no partial UTF-8 is emitted, and
// stop strings are found across token boundaries.
#include "engine/text_stream.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

std::string bytes_decode(std::span<const int32_t> ids) {
  std::string s;
  for (const int32_t id : ids) s += static_cast<char>(id);
  return s;
}

std::vector<int32_t> bytes_of(const std::string& text) {
  std::vector<int32_t> ids;
  for (const char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

// Streams `text` byte by byte; returns the pieces emitted (the final finish() piece last).
std::vector<std::string> stream(const std::string& text, std::vector<std::string> stops, bool* stopped = nullptr) {
  TextStream s(bytes_decode, std::move(stops));
  std::vector<std::string> pieces;
  for (const int32_t id : bytes_of(text)) pieces.push_back(s.push(id));
  pieces.push_back(s.finish());
  if (stopped) *stopped = s.stopped();
  return pieces;
}

std::string join(const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += p;
  return out;
}

TEST(TextStreamTest, NeverEmitsPartialUtf8) {
  const std::string text = "a\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80!";  // a, e-acute, euro sign, emoji
  const auto pieces = stream(text, {});
  EXPECT_EQ(join(pieces), text);
  for (const auto& piece : pieces) EXPECT_FALSE(ends_incomplete_utf8(piece)) << piece;
  // The emoji's four bytes arrive in one piece, after its last byte.
  EXPECT_EQ(pieces[11], "\xF0\x9F\x98\x80");
  EXPECT_EQ(pieces[10], "");
}

TEST(TextStreamTest, StopStringAcrossTokensEndsTheStream) {
  bool stopped = false;
  const auto pieces = stream("Hello<|end|>more", {"<|end|>"}, &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(join(pieces), "Hello");
}

TEST(TextStreamTest, HeldBackPrefixIsReleasedWhenItIsNotAStop) {
  bool stopped = true;
  const auto pieces = stream("a<|en d", {"<|end|>"}, &stopped);
  EXPECT_FALSE(stopped);
  EXPECT_EQ(join(pieces), "a<|en d");
  EXPECT_EQ(pieces[1], "");  // "<" was held while it could start the stop string
}

TEST(TextStreamTest, UnfinishedStopPrefixIsEmittedAtTheEnd) {
  const auto pieces = stream("x<|e", {"<|end|>"});
  EXPECT_EQ(pieces.back(), "<|e");
}

// Hugging Face's ByteFallback decoder: ids below 256 are byte tokens, and a run
// of them that is not valid UTF-8 decodes to one U+FFFD per byte; ids from 256
// are text tokens (id - 256 as one ASCII character).
std::string byte_fallback_decode(std::span<const int32_t> ids) {
  std::string out, run;
  const auto flush = [&] {
    bool valid = !ends_incomplete_utf8(run);
    for (const char c : run) valid = valid && static_cast<uint8_t>(c) != 0x84;  // the one invalid byte used here
    if (valid) out += run;
    else
      for (size_t i = 0; i < run.size(); ++i) out += "\xEF\xBF\xBD";
    run.clear();
  };
  for (const int32_t id : ids) {
    if (id < 256) {
      run += static_cast<char>(id);
      continue;
    }
    flush();
    out += static_cast<char>(id - 256);
  }
  flush();
  return out;
}

// A token that rewrites text already emitted ("m" then a stray 0x84 byte: the
// run decodes as two U+FFFD) must not stall the stream: the text after it still
// comes out, as it is generated and at the end. (Failed before new_text_start:
// only "m" ever came out, the rest waited for a prefix that never came back.)
TEST(TextStreamTest, TextAfterARewrittenByteRunStillComesOut) {
  TextStream s(byte_fallback_decode, {});
  EXPECT_EQ(s.push('m'), "m");
  EXPECT_EQ(s.push(0x84), "");  // ends in U+FFFD: wait
  EXPECT_EQ(s.push(256 + 'x'), "\xEF\xBF\xBDx");
  EXPECT_EQ(s.push(256 + 'y'), "y");
  EXPECT_EQ(s.push(0x84), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");
}

TEST(TextStreamTest, DetectsIncompleteUtf8) {
  EXPECT_FALSE(ends_incomplete_utf8(""));
  EXPECT_FALSE(ends_incomplete_utf8("abc"));
  EXPECT_TRUE(ends_incomplete_utf8("a\xC3"));
  EXPECT_FALSE(ends_incomplete_utf8("a\xC3\xA9"));
  EXPECT_TRUE(ends_incomplete_utf8("\xF0\x9F\x98"));
  EXPECT_TRUE(ends_incomplete_utf8("ok\xEF\xBF\xBD"));  // U+FFFD placeholder
}

}  // namespace
}  // namespace tessera
