// `tessera generate|chat --model FILE.gguf` end to end, as a user runs them: on
// every fixture GGUF (tests/fixtures/gguf/models) the ids, the text and the chat
// answer are llama.cpp's own on the same file (llama_greedy against libllama,
// recorded by make_quantized_ggufs.sh in llama_cpp_greedy.json). A broken GGUF
// is refused with one line naming the file and what was wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_fixtures.h"
#include "support/run_tessera.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // run_tessera.h, gguf_fixtures.h

nlohmann::json recorded() { return nlohmann::json::parse(slurp(gguf_models_dir() + "llama_cpp_greedy.json")); }

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

// A file for the shell to read: the text as it is, whatever bytes it holds.
std::string write_temp(const std::string& name, const std::string& bytes) {
  const fs::path path = fs::path(::testing::TempDir()) / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

// Every run here uses an f16 KV cache, llama.cpp's default, as its recorded runs did (see
// GgufLlamaCpp.GreedyTokensEqualLlamaCppsOnTheSameFile for the near-tie that needs it).
TEST(GgufCli, GenerateGivesLlamaCppsGreedyIdsOnEveryFile) {
  const auto files = recorded();
  ASSERT_GE(files.size(), 13u);
  for (const auto& [file, entry] : files.items()) {
    SCOPED_TRACE(file);
    const CommandResult run = run_tessera("generate --model " + gguf_model(file) + " --prompt-ids " +
                                          join(entry["prompt"]) + " -n 8 --threads 2 --kv-dtype f16");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.out, join(entry["greedy"]) + "\n");
  }
}

// Text in, text out: the GGUF's own tokenizer gives llama.cpp's tokens of the prompt, and
// generation up to the end-of-generation token prints llama.cpp's text. Random weights often
// make byte tokens that are not UTF-8: llama.cpp prints them raw, and tessera's decoding of
// them differs (see docs/gguf.md), so the text is compared where llama.cpp's is UTF-8.
void expect_llama_cpps_text(const std::string& prefix, const std::string& command_of_file) {
  const auto files = recorded();
  int compared = 0;
  for (const auto& [file, entry] : files.items()) {
    SCOPED_TRACE(file);
    auto gguf = GgufFile::open(gguf_model(file));
    ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
    auto tokenizer = Tokenizer::from_gguf(gguf->metadata(), gguf->path());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
    const bool chat = prefix == "chat";
    auto ids =
        tokenizer->encode(entry[prefix + "_prompt"].get<std::string>(), {.parse_special = chat, .add_special = !chat});
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, entry[prefix + "_prompt_ids"].get<std::vector<int32_t>>());
    const std::string want = entry[prefix + "_output"];
    if (want.find("\xEF\xBF\xBD") != std::string::npos) continue;
    const CommandResult run =
        run_tessera(command_of_file + " --model " + gguf_model(file) + " -n 8 --threads 2 --kv-dtype f16");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.out, want + "\n");
    ++compared;
  }
  EXPECT_GE(compared, 2);
}

TEST(GgufCli, GenerateFromTextGivesLlamaCppsText) {
  const std::string prompt = write_temp("gguf_cli_prompt.txt", recorded().begin().value()["text_prompt"]);
  expect_llama_cpps_text("text", "generate --prompt-file " + prompt);
}

// The chat template comes from tokenizer.chat_template: one turn "a b c d e" is answered as
// llama.cpp answers the template's rendering of it.
TEST(GgufCli, ChatAnswersThroughTheGgufsTemplateAsLlamaCpp) {
  const std::string input = write_temp("gguf_cli_chat.txt", "a b c d e\n");
  expect_llama_cpps_text("chat", "chat < " + input);
}

// A copy of fixture `name` with `edit` applied to its bytes.
std::string broken_copy(const std::string& name, const std::string& tag, void (*edit)(std::string&)) {
  std::string bytes = slurp(gguf_model(name));
  edit(bytes);
  return write_temp("gguf_cli_" + tag + ".gguf", bytes);
}

void replace_once(std::string& bytes, const std::string& from, const std::string& to) {
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  bytes.replace(at, from.size(), to);
}

TEST(GgufCli, ABrokenGgufIsRefusedNamingWhatWasWrong) {
  const std::string prompt = " --prompt hello -n 2 --threads 2";
  // Cut short inside the tensor data: the last tensor's bytes run past the end.
  const std::string cut = broken_copy("llama256_f16_q4_k_m", "cut", [](std::string& b) { b.resize(b.size() - 100); });
  for (const std::string& args : {prompt, std::string(" --prompt-ids 1,2 -n 2")})
    expect_refused(run_tessera("generate --model " + cut + args),
                   {cut, "blk.1.ffn_up.weight", "outside the data section"});
  // An architecture tessera does not run.
  const std::string gemma = broken_copy("llama_f16", "gemma", [](std::string& b) {
    replace_once(b, std::string("\x05\0\0\0\0\0\0\0llama", 13), std::string("\x05\0\0\0\0\0\0\0gemma", 13));
  });
  expect_refused(run_tessera("generate --model " + gemma + prompt), {"GGUF architecture 'gemma' is not supported"});
  // A tokenizer model tessera does not know.
  const std::string bert = broken_copy("llama3_f32", "bert", [](std::string& b) {
    replace_once(b, std::string("tokenizer.ggml.model\x08\0\0\0\x05\0\0\0\0\0\0\0llama", 37),
                 std::string("tokenizer.ggml.model\x08\0\0\0\x05\0\0\0\0\0\0\0bertx", 37));
  });
  expect_refused(run_tessera("generate --model " + bert + prompt), {"bertx"});
  // A chat template that does not parse.
  const std::string chat =
      broken_copy("qwen2_f32", "template", [](std::string& b) { replace_once(b, "{% endfor %}", "{% endfxr %}"); });
  expect_refused(run_tessera("generate --chat --model " + chat + prompt), {chat, "tokenizer.chat_template"});
  // Not a GGUF at all.
  const std::string junk = write_temp("gguf_cli_junk.gguf", "GGUX and then some bytes");
  expect_refused(run_tessera("generate --model " + junk + prompt), {junk});
}

}  // namespace
}  // namespace tessera
