// `tessera quantize` against llama.cpp's llama-quantize: on the fixture GGUFs
// (tests/fixtures/gguf/models, quantized by llama-quantize in
// make_quantized_ggufs.sh) tessera writes the same file, byte for byte: the same
// blocks (ggml's reference quantizers), the same per-tensor types (the q4_k_m and
// q5_k_m mixes, q6_k output, the Q8_0 fallback of 64-wide rows), the same tensor
// order and metadata. llama.cpp's gguf-py reads what it writes, and tessera runs it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/gguf.h"
#include "io/gguf_fixtures.h"
#include "support/run_tessera.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // run_tessera.h, gguf_fixtures.h
std::string temp(const std::string& name) { return (fs::path(::testing::TempDir()) / name).string(); }

// Where two GGUF files first differ, for a readable failure.
std::string first_difference(const std::string& ours, const std::string& theirs) {
  auto a = GgufFile::open(ours);
  auto b = GgufFile::open(theirs);
  if (!a.ok() || !b.ok()) return "cannot parse: " + (a.ok() ? b.status() : a.status()).message();
  const auto& ta = a->header().tensors;
  const auto& tb = b->header().tensors;
  if (ta.size() != tb.size()) return "tensor counts differ";
  for (size_t i = 0; i < ta.size(); ++i) {
    if (ta[i].name != tb[i].name) return "tensor " + std::to_string(i) + " is " + std::string(ta[i].name);
    if (ta[i].type != tb[i].type)
      return std::string(ta[i].name) + " is " + std::string(ggml_type_name(ta[i].type)) + ", llama.cpp's " +
             std::string(ggml_type_name(tb[i].type));
    const auto x = a->bytes(ta[i]), y = b->bytes(tb[i]);
    if (!std::equal(x.begin(), x.end(), y.begin(), y.end())) return std::string(ta[i].name) + "'s blocks differ";
  }
  return "the metadata differs";
}

TEST(GgufQuantize, WritesLlamaQuantizesFileByteForByte) {
  const std::pair<const char*, const char*> cases[] = {
      {"llama256_f16", "q4_k_m"}, {"llama256_f16", "q5_k_m"}, {"llama256_f16", "q6_k"}, {"llama256_f16", "q8_0"},
      {"llama3_f32", "q8_0"},     {"llama3_f32", "q4_0"},     {"qwen3_bf16", "q8_0"},   {"qwen3_bf16", "q4_0"}};
  for (const auto& [fixture, type] : cases) {
    SCOPED_TRACE(std::string(fixture) + " " + type);
    const std::string out = temp(std::string(fixture) + "_" + type + ".gguf");
    const std::string theirs = gguf_model(std::string(fixture) + "_" + type);
    const CommandResult run =
        run_tessera("quantize --model " + gguf_model(fixture) + " --type " + type + " --out " + out + " --threads 3");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_TRUE(slurp(out) == slurp(theirs)) << first_difference(out, theirs);
  }
}

// The written file runs in tessera (greedy ids as llama.cpp's on its own quantization,
// which is the same file) and gguf-py reads it (when python3 with numpy is there).
TEST(GgufQuantize, TesseraAndGgufPyReadWhatItWrites) {
  const std::string out = temp("llama256_q4_k_m.gguf");
  ASSERT_EQ(run_tessera("quantize --model " + gguf_model("llama256_f16") + " --type Q4_K_M --out " + out).exit_code, 0);
  const CommandResult run = run_tessera("generate --model " + out + " --prompt 'a b c d e' -n 4 --threads 2");
  EXPECT_EQ(run.exit_code, 0) << run.err;

  const std::string gguf_py = std::string(TESSERA_SOURCE_DIR) + "/.cache/llama-peer/llama.cpp/gguf-py";
  if (!fs::exists(gguf_py) || std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "no gguf-py at " << gguf_py << " or no numpy";
  const std::string listing = temp("gguf_py_listing.txt");
  const std::string script =
      "import gguf,sys; r=gguf.GGUFReader(sys.argv[1]); "
      "print(' '.join(t.tensor_type.name for t in r.tensors), int(r.fields['general.file_type'].parts[-1][0]))";
  ASSERT_EQ(std::system(
                ("PYTHONPATH=" + gguf_py + " /usr/bin/python3 -c \"" + script + "\" " + out + " > " + listing).c_str()),
            0);
  const std::string text = slurp(listing);
  EXPECT_NE(text.find("Q6_K F32 Q4_K"), std::string::npos) << text;  // output, output_norm, token_embd
  EXPECT_NE(text.find(" 15\n"), std::string::npos) << text;          // LLAMA_FTYPE_MOSTLY_Q4_K_M
}

TEST(GgufQuantize, BadInputIsRefusedNamingWhatIsWrong) {
  const std::string out = temp("refused.gguf");
  expect_refused(run_tessera("quantize --model " + gguf_model("llama256_f16") + " --type q3_k --out " + out),
                 {"q3_k", "q4_k_m"});
  // Already quantized: llama-quantize also refuses without --allow-requantize.
  expect_refused(run_tessera("quantize --model " + gguf_model("llama256_f16_q8_0") + " --type q4_0 --out " + out),
                 {"llama256_f16_q8_0.gguf", "output.weight", "already Q8_0"});
  // 64-wide rows hold no whole Q4_K block; llama.cpp's Q5_0 fallback is not a type tessera runs.
  expect_refused(run_tessera("quantize --model " + gguf_model("llama3_f32") + " --type q4_k_m --out " + out),
                 {"llama3_f32.gguf", "rows of 64", "q4_k"});
  expect_refused(run_tessera("quantize --model /nonexistent.gguf --type q8_0 --out " + out), {"/nonexistent.gguf"});
}

}  // namespace
}  // namespace tessera
