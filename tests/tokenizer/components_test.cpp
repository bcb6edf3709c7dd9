// Unit tests of the tokenizer components on small hand-written tokenizer.json
// snippets: normalizers, pre-tokenizers (every split behavior), the BPE model,
// added-token flags, post-processors and decoders. Expected values follow
// Hugging Face's semantics; the cases marked "HF:" were checked against the
// reference library (npm tokenizers 0.23.2) with the same snippet.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using nlohmann::json;
using Strings = std::vector<std::string>;

std::string normalize(const json& config, std::string text) {
  auto normalizer = tok::make_normalizer(config);
  EXPECT_TRUE(normalizer.ok()) << normalizer.status().to_string();
  if (!normalizer.ok()) return "<error>";
  const Status status = (*normalizer)->normalize(text);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return text;
}

Strings pre_tokenize(const json& config, const std::string& text, bool at_start = true) {
  auto pre = tok::make_pre_tokenizer(config);
  EXPECT_TRUE(pre.ok()) << pre.status().to_string();
  if (!pre.ok()) return {"<error>"};
  std::vector<tok::Piece> pieces{{text, at_start}};
  (*pre)->pre_tokenize(pieces);
  Strings out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

std::string decode_chain(const json& config, Strings tokens) {
  auto decoder = tok::make_decoder(config);
  EXPECT_TRUE(decoder.ok()) << decoder.status().to_string();
  if (!decoder.ok()) return "<error>";
  (*decoder)->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

json split(const std::string& regex, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", behavior}, {"invert", invert}};
}

// ---- normalizers ----

TEST(NormalizerTest, UnicodeForms) {
  EXPECT_EQ(normalize({{"type", "NFC"}}, "e\xCC\x81t\xC3\xA9"), "\xC3\xA9t\xC3\xA9");  // e + U+0301 -> é
  EXPECT_EQ(normalize({{"type", "NFD"}}, "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "\xEF\xAC\x81x\xE2\x91\xA0"), "fix1");  // ﬁ, ①
  EXPECT_EQ(normalize({{"type", "NFKD"}}, "\xEF\xAC\x81"), "fi");
  EXPECT_EQ(normalize({{"type", "NFC"}}, "plain ascii"), "plain ascii");
}

TEST(NormalizerTest, LowercaseIsPerCharacter) {
  // Σ at the end of a word stays σ (no final-sigma context, as Rust's char::to_lowercase); İ -> i + U+0307.
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "HELLO \xCE\xA3\xCE\xA3 \xC4\xB0"), "hello \xCF\x83\xCF\x83 i\xCC\x87");
}

TEST(NormalizerTest, ReplacePrependStripSequence) {
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}, "a b  c"),
            "a\xE2\x96\x81"
            "b\xE2\x96\x81\xE2\x96\x81"
            "c");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "_"}}, "a \t b\nc"), "a_b_c");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", ""}}, "xaxbx"), "ab");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, "hi"), "\xE2\x96\x81hi");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, ""), "");  // empty stays empty
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \t a b \n"), "a b \n");
  const json sequence = {{"type", "Sequence"},
                         {"normalizers",
                          {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                           {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  EXPECT_EQ(normalize(sequence, "a b"),
            "\xE2\x96\x81"
            "a\xE2\x96\x81"
            "b");
}

// ---- pre-tokenizers ----

TEST(PreTokenizerTest, SplitBehaviors) {
  const std::string text = "a,b,,c";
  EXPECT_EQ(pre_tokenize(split(",", "Removed"), text), (Strings{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize(split(",", "Isolated"), text), (Strings{"a", ",", "b", ",", ",", "c"}));
  EXPECT_EQ(pre_tokenize(split(",", "MergedWithPrevious"), text), (Strings{"a,", "b,", ",", "c"}));
  EXPECT_EQ(pre_tokenize(split(",", "MergedWithNext"), text), (Strings{"a", ",b", ",", ",c"}));
  EXPECT_EQ(pre_tokenize(split(",", "Contiguous"), text), (Strings{"a", ",", "b", ",,", "c"}));
  // invert: the matches are what is kept (o200k's Split is Removed + invert).
  EXPECT_EQ(pre_tokenize(split("[a-z]+", "Removed", true), "ab, cd!"), (Strings{"ab", "cd"}));
  EXPECT_EQ(pre_tokenize(split("[a-z]+", "Isolated", true), "ab, cd"), (Strings{"ab", ", ", "cd"}));
  const json string_pattern = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}};
  EXPECT_EQ(pre_tokenize(string_pattern, "a b  c"), (Strings{"a ", "b ", " ", "c"}));
}

TEST(PreTokenizerTest, SplitRegexIsUnicodeAware) {
  // Llama 3's pattern: letters by \p{L}, digits in groups of at most three, spaces kept with the next word.
  const std::string llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+";
  EXPECT_EQ(pre_tokenize(split(llama3, "Isolated"), "I'M caf\xC3\xA9 12345  \xD0\xBC\xD0\xB8\xD1\x80!\n\n x"),
            (Strings{"I", "'M", " caf\xC3\xA9", " ", "123", "45", " ", " \xD0\xBC\xD0\xB8\xD1\x80", "!\n\n", " x"}));
  // U+180E is not white space for Oniguruma (Unicode's White_Space), though PCRE2's \s matches it.
  EXPECT_EQ(pre_tokenize(split("\\s+", "Removed"),
                         "a\xE1\xA0\x8E"
                         "b c"),
            (Strings{"a\xE1\xA0\x8E"
                     "b",
                     "c"}));
  EXPECT_EQ(pre_tokenize(split("\\S+", "Removed", true),
                         "a\xE1\xA0\x8E"
                         "b c"),
            (Strings{"a\xE1\xA0\x8E"
                     "b",
                     "c"}));
}

TEST(PreTokenizerTest, ByteLevel) {
  const json plain = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  // HF: "Hello my friend, how" -> Hello Ġmy Ġfriend , Ġhow
  EXPECT_EQ(pre_tokenize(plain, "Hello my friend, how"), (Strings{"Hello", "\xC4\xA0my",
                                                                  "\xC4\xA0"
                                                                  "friend",
                                                                  ",", "\xC4\xA0how"}));
  const json prefix = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  EXPECT_EQ(pre_tokenize(prefix, "hi\n"), (Strings{"\xC4\xA0hi\xC4\x8A"}));  // space -> Ġ, \n -> Ċ
  EXPECT_EQ(pre_tokenize(prefix, " hi"), (Strings{"\xC4\xA0hi"}));           // no second space
  // Every byte maps to one printable character; é (C3 A9) becomes Ã©.
  EXPECT_EQ(pre_tokenize(plain, "\xC3\xA9"), (Strings{"\xC3\x83\xC2\xA9"}));
}

TEST(PreTokenizerTest, Metaspace) {
  const std::string m = "\xE2\x96\x81";
  const json always = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(pre_tokenize(always, "hi there  x"), (Strings{m + "hi", m + "there", m, m + "x"}));
  const json first = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "first"}, {"split", false}};
  EXPECT_EQ(pre_tokenize(first, "a b", true), (Strings{m + "a" + m + "b"}));
  EXPECT_EQ(pre_tokenize(first, "a b", false), (Strings{"a" + m + "b"}));  // not at the start of the input
  const json never = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "never"}, {"split", true}};
  EXPECT_EQ(pre_tokenize(never, "a b"), (Strings{"a", m + "b"}));
  const json legacy = {{"type", "Metaspace"}, {"replacement", m}, {"add_prefix_space", true}};
  EXPECT_EQ(pre_tokenize(legacy, "a"), (Strings{m + "a"}));
}

TEST(PreTokenizerTest, DigitsPunctuationWhitespaceSequence) {
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", true}}, "a123b"),
            (Strings{"a", "1", "2", "3", "b"}));
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", false}}, "a123b4"),
            (Strings{"a", "123", "b", "4"}));
  EXPECT_EQ(pre_tokenize({{"type", "Punctuation"}}, "Hey, you!?"), (Strings{"Hey", ",", " you", "!", "?"}));
  EXPECT_EQ(pre_tokenize({{"type", "Punctuation"}, {"behavior", "Contiguous"}}, "a!?b"), (Strings{"a", "!?", "b"}));
  EXPECT_EQ(pre_tokenize({{"type", "Whitespace"}}, "Hey man!! caf\xC3\xA9_1 "),
            (Strings{"Hey", "man", "!!", "caf\xC3\xA9_1"}));
  EXPECT_EQ(pre_tokenize({{"type", "WhitespaceSplit"}},
                         " a\tb\xE2\x80\x83"
                         "c "),
            (Strings{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize({{"type", "CharDelimiterSplit"}, {"delimiter", "-"}}, "a-b--c"), (Strings{"a", "b", "c"}));
  const json sequence = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(pre_tokenize(sequence, "ab12 c"), (Strings{"ab", "1", "2", "c"}));
}

// ---- decoders ----

TEST(DecoderTest, EachDecoder) {
  EXPECT_EQ(decode_chain({{"type", "ByteLevel"}}, {"Hello", "\xC4\xA0my", "\xC3\x83\xC2\xA9"}), "Hello my\xC3\xA9");
  // A lone byte of a multi-byte character decodes to U+FFFD (lossy), as HF.
  EXPECT_EQ(decode_chain({{"type", "ByteLevel"}}, {"\xC3\x83"}), "\xEF\xBF\xBD");
  const std::string m = "\xE2\x96\x81";
  EXPECT_EQ(decode_chain({{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}},
                         {m + "Hey", m + "friend" + m}),
            "Hey friend ");
  EXPECT_EQ(decode_chain({{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "never"}}, {m + "a"}), " a");
  // Byte tokens forming valid UTF-8 join; an invalid run gives one U+FFFD per byte.
  EXPECT_EQ(decode_chain({{"type", "ByteFallback"}}, {"<0xC3>", "<0xA9>", "x", "<0xE2>", "<0x82>", "y"}),
            "\xC3\xA9x\xEF\xBF\xBD\xEF\xBF\xBDy");
  EXPECT_EQ(decode_chain({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}, {"  a ", " b"}), " a b");
  EXPECT_EQ(decode_chain({{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}}, {m + "a" + m}), " a ");
  const json llama2 = {{"type", "Sequence"},
                       {"decoders",
                        {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                         {{"type", "ByteFallback"}},
                         {{"type", "Fuse"}},
                         {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(decode_chain(llama2, {m + "Hello", m + "w", "<0xC3>", "<0xA9>"}), "Hello w\xC3\xA9");
}

// ---- whole tokenizers: BPE, added tokens, post-processors ----

std::string byte_level_char(int b) { return tok::byte_level_char(static_cast<uint8_t>(b)); }

// A byte-level BPE whose ids 0..255 are the bytes, plus merges given as "a b".
json byte_level_tokenizer(const std::vector<std::string>& merges, bool pairs = false, bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(b)] = b;
  json merge_list = json::array();
  int next = 256;
  for (const auto& merge : merges) {
    const size_t space = merge.find(' ');
    const std::string a = merge.substr(0, space), b = merge.substr(space + 1);
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    if (pairs) {
      merge_list.push_back({a, b});
    } else {
      merge_list.push_back(merge);
    }
  }
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"ignore_merges", ignore_merges}}}};
}

Tokenizer load(const json& config) {
  auto tokenizer = Tokenizer::from_json(config.dump());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  if (!tokenizer.ok()) std::abort();
  return std::move(*tokenizer);
}

std::vector<int32_t> encode(const Tokenizer& tokenizer, const std::string& text, bool parse_special = true,
                            bool add_special = true) {
  auto ids = tokenizer.encode(text, {parse_special, add_special});
  EXPECT_TRUE(ids.ok()) << ids.status().to_string();
  return ids.ok() ? *ids : std::vector<int32_t>{-1};
}

TEST(BpeTest, MergesByRankThenLeftmost) {
  const std::string G = byte_level_char(' ');
  // "l l" (rank 0) beats "e l" (rank 1): hello -> h e ll o; then "h e" -> he.
  const Tokenizer t = load(byte_level_tokenizer({"l l", "e l", "h e", "he ll", G + " w"}));
  const auto id = [&](const std::string& token) { return *t.token_to_id(token); };
  EXPECT_EQ(encode(t, "hello world"), (std::vector<int32_t>{id("hell"), 'o', id(G + "w"), 'o', 'r', 'l', 'd'}));
  // Equal ranks: the leftmost pair merges first ("aaa" -> aa a).
  const Tokenizer t2 = load(byte_level_tokenizer({"a a"}));
  EXPECT_EQ(encode(t2, "aaa"), (std::vector<int32_t>{*t2.token_to_id("aa"), 'a'}));
}

TEST(BpeTest, MergePairsEqualMergeStrings) {
  const std::vector<std::string> merges = {"l l", "e l", "h e", "he ll"};
  const Tokenizer strings = load(byte_level_tokenizer(merges)), pairs = load(byte_level_tokenizer(merges, true));
  EXPECT_EQ(encode(strings, "hello hell yell"), encode(pairs, "hello hell yell"));
}

TEST(BpeTest, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json config = byte_level_tokenizer({"a b", "ab c"}, false, true);
  config["model"]["vocab"]["abcd"] = 300;  // reachable only as a whole word
  const Tokenizer t = load(config);
  EXPECT_EQ(encode(t, "abcd"), (std::vector<int32_t>{300}));
  EXPECT_EQ(encode(t, "abcx"), (std::vector<int32_t>{*t.token_to_id("abc"), 'x'}));
  config["model"]["ignore_merges"] = false;
  EXPECT_EQ(encode(load(config), "abcd"), (std::vector<int32_t>{*t.token_to_id("abc"), 'd'}));
}

// SentencePiece-style: Prepend + Replace normalizer, no pre-tokenizer, byte fallback.
json spm_tokenizer() {
  const std::string m = "\xE2\x96\x81";
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const std::string& t : {m, std::string("h"), std::string("i"), m + "h", m + "hi", std::string("\xC3\xA9")})
    vocab[t] = next++;
  return {{"added_tokens",
           {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
            {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", m}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", {m + " h", m + "h i"}}}}};
}

TEST(BpeTest, SentencePieceStyleWithByteFallbackAndTemplate) {
  const Tokenizer t = load(spm_tokenizer());
  const int32_t m = *t.token_to_id("\xE2\x96\x81"), mhi = *t.token_to_id("\xE2\x96\x81hi");
  const int32_t e_acute = *t.token_to_id("\xC3\xA9");
  // "hi hé!" -> ▁hi▁hé!: ▁hi ▁h é, then '!' (0x21) through byte fallback; BOS from the template.
  EXPECT_EQ(encode(t, "hi h\xC3\xA9!"),
            (std::vector<int32_t>{1, mhi, *t.token_to_id("\xE2\x96\x81h"), e_acute, 3 + 0x21}));
  EXPECT_EQ(encode(t, "i"), (std::vector<int32_t>{1, m, *t.token_to_id("i")}));
  EXPECT_EQ(encode(t, "hi", true, false), (std::vector<int32_t>{mhi}));  // add_special=false: no BOS
  // Decoding strips the prepended space and joins byte tokens.
  auto text = t.decode(encode(t, "hi h\xC3\xA9!\xF0\x9F\x98\x80", true, false));
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, "hi h\xC3\xA9!\xF0\x9F\x98\x80");
}

TEST(BpeTest, LongSentencePieceTextsSplitAtMetaspaceGiveTheSameIds) {
  // Over 256 bytes without a pre-tokenizer, the text is encoded in pieces cut before
  // each U+2581 that follows another character, unless an entry such as "i▁"
  // could merge across such a cut; both ways must give the same ids.
  std::string text;
  for (int i = 0; i < 60; ++i) text += i % 7 ? "hi h\xC3\xA9 " : "hihi  hi\xF0\x9F\x98\x80 ";
  json config = spm_tokenizer();
  const std::vector<int32_t> split = encode(load(config), text);
  config["model"]["vocab"]["i\xE2\x96\x81"] = 400;  // makes cutting unsafe: whole-text merge
  EXPECT_EQ(encode(load(config), text), split);
  EXPECT_GT(split.size(), 100u);
}

TEST(BpeTest, UnknownCharactersFuseIntoOneUnk) {
  json config = spm_tokenizer();
  config["model"]["byte_fallback"] = false;
  const Tokenizer fused = load(config);
  EXPECT_EQ(encode(fused, "hxyi", true, false),
            (std::vector<int32_t>{*fused.token_to_id("\xE2\x96\x81h"), 0, *fused.token_to_id("i")}));
  config["model"]["fuse_unk"] = false;
  const Tokenizer unfused = load(config);
  EXPECT_EQ(encode(unfused, "hxyi", true, false),
            (std::vector<int32_t>{*unfused.token_to_id("\xE2\x96\x81h"), 0, 0, *unfused.token_to_id("i")}));
}

// A byte-level tokenizer with added tokens carrying each flag.
json added_tokens_tokenizer() {
  json config = byte_level_tokenizer({});
  config["added_tokens"] = {
      {{"id", 300}, {"content", "<|ctl|>"}, {"special", true}, {"normalized", false}},
      {{"id", 301}, {"content", "<L>"}, {"special", false}, {"normalized", false}, {"lstrip", true}},
      {{"id", 302}, {"content", "<R>"}, {"special", false}, {"normalized", false}, {"rstrip", true}},
      {{"id", 303}, {"content", "cat"}, {"special", false}, {"normalized", true}, {"single_word", true}},
      {{"id", 304}, {"content", "<|ctl|>x"}, {"special", false}, {"normalized", false}},
      {{"id", 305}, {"content", "dog"}, {"special", false}, {"normalized", true}}};
  config["normalizer"] = {{"type", "Lowercase"}};
  return config;
}

TEST(AddedTokensTest, IdsAreAssignedAsHfAssignsThem) {
  // HF ignores the file's ids: contents in the vocab take the vocab's id, others
  // the next ids after the vocabulary (256 here), in file order. HF: same ids.
  json config = added_tokens_tokenizer();
  config["added_tokens"].push_back({{"id", 7}, {"content", "a"}, {"special", false}, {"normalized", false}});
  const Tokenizer t = load(config);
  EXPECT_EQ(t.token_to_id("<|ctl|>"), 256);
  EXPECT_EQ(t.token_to_id("dog"), 261);
  EXPECT_EQ(t.token_to_id("a"), 'a');
  EXPECT_EQ(t.id_to_token(300), std::nullopt);
}

TEST(AddedTokensTest, FlagsAndLongestMatch) {
  const Tokenizer t = load(added_tokens_tokenizer());
  const int32_t G = ' ';  // byte ids are the bytes
  // HF: each expectation below is the reference's output for this tokenizer.
  // Longest match wins at the same start: "<|ctl|>x" (260) over "<|ctl|>" (256).
  EXPECT_EQ(encode(t, "<|ctl|>x<|ctl|>y"), (std::vector<int32_t>{260, 256, 'y'}));
  // lstrip eats the spaces before <L> (257); rstrip those after <R> (258).
  EXPECT_EQ(encode(t, "a  <L>b"), (std::vector<int32_t>{'a', 257, 'b'}));
  EXPECT_EQ(encode(t, "a<R>  b"), (std::vector<int32_t>{'a', 258, 'b'}));
  // normalized=true tokens match the lowercased text; single_word "cat" (259) only between non-word characters.
  EXPECT_EQ(encode(t, "A CAT, dogs"), (std::vector<int32_t>{'a', G, 259, ',', G, 261, 's'}));
  EXPECT_EQ(encode(t, "cats"), (std::vector<int32_t>{'c', 'a', 't', 's'}));
}

TEST(AddedTokensTest, ParseSpecialFalseEncodesSpecialTextAsText) {
  const Tokenizer t = load(added_tokens_tokenizer());
  // The special token's text stays text; the match is skipped as a whole (HF encode_special_tokens).
  EXPECT_EQ(encode(t, "<|ctl|>y", false), (std::vector<int32_t>{'<', '|', 'c', 't', 'l', '|', '>', 'y'}));
  // Non-special added tokens are still matched.
  EXPECT_EQ(encode(t, "<R>", false), (std::vector<int32_t>{258}));
  auto text = t.decode(std::vector<int32_t>{'a', 256, 257});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "a<|ctl|><L>");
  auto skipped = t.decode(std::vector<int32_t>{'a', 256, 257}, /*skip_special=*/true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, "a<L>");
}

TEST(PostProcessorTest, TemplateWithBosAndEos) {
  json config = byte_level_tokenizer({});
  config["added_tokens"] = {{{"id", 256}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                            {{"id", 257}, {"content", "</s>"}, {"special", true}, {"normalized", false}}};
  config["post_processor"] = {{"type", "Sequence"},
                              {"processors",
                               {{{"type", "ByteLevel"}, {"trim_offsets", false}},
                                {{"type", "TemplateProcessing"},
                                 {"single",
                                  {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                   {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                   {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                                 {"special_tokens",
                                  {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}},
                                   {"</s>", {{"id", "</s>"}, {"ids", {257}}, {"tokens", {"</s>"}}}}}}}}}};
  const Tokenizer t = load(config);
  EXPECT_EQ(encode(t, "hi"), (std::vector<int32_t>{256, 'h', 'i', 257}));
  EXPECT_EQ(encode(t, "hi", true, false), (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(encode(t, ""), (std::vector<int32_t>{256, 257}));
}

TEST(TokenizerTest, EncodeFromManyThreadsGivesTheSameIds) {
  // The word cache is shared: one thread uses it, the others encode without it.
  const Tokenizer t = load(byte_level_tokenizer({"l l", "e l", "h e", "he ll"}));
  std::string text;
  for (int i = 0; i < 500; ++i) text += "hello yell " + std::to_string(i) + " hell\n";
  const std::vector<int32_t> expected = encode(t, text);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int r = 0; r < 20; ++r)
        if (t.encode(text).value() != expected) ++mismatches;
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(RegexTest, RewritesWhiteSpaceClasses) {
  EXPECT_EQ(tok::rewrite_onig_pattern("a\\d"), "a\\d");
  EXPECT_NE(tok::rewrite_onig_pattern("\\s").find("\\x{3000}"), std::string::npos);
  EXPECT_EQ(tok::rewrite_onig_pattern("[^\\s\\p{L}]").rfind("[^", 0), 0u);
  EXPECT_EQ(tok::rewrite_onig_pattern("\\\\s"), "\\\\s");  // an escaped backslash, then a literal s
}

}  // namespace
}  // namespace tessera
