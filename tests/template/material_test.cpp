// Real chat templates against Python's jinja2 (label: model).
//
// For every template in llama.cpp's models/templates/*.jinja and the
// chat_template of each tokenizers/<name>/tokenizer_config.json (from
// scripts/fetch_test_material.sh's cache), and every conversation in
// tests/template/conversations.json, ChatTemplate's output must equal the
// committed reference tests/template/expected/<template>/<conversation>.txt,
// rendered by tools/template_reference/render.py with Debian's python3-jinja2
// configured as transformers configures it. Where jinja2 itself failed
// (<conversation>.error), tessera must fail too.
//
// The test list comes from the committed references; each test skips, saying
// so, when the material cache is absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

#include "template/chat_template.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

fs::path source_dir() { return fs::path(TESSERA_SOURCE_DIR); }
fs::path expected_dir() { return source_dir() / "tests/template/expected"; }

fs::path material_dir() {
  if (const char* env = std::getenv("TESSERA_TEST_MATERIAL")) return env;
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "/root") / ".cache/tessera-test-material";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json& conversations() {
  static const ordered_json json = ordered_json::parse(read_file(source_dir() / "tests/template/conversations.json"));
  return json;
}

std::tm fixed_now() {
  std::tm tm{};
  std::istringstream in(conversations()["now"].get<std::string>());
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  timegm(&tm);  // fills tm_wday / tm_yday for %a, %j
  return tm;
}

// The template names the references exist for.
std::vector<std::string> reference_names() {
  std::vector<std::string> names;
  if (!fs::is_directory(expected_dir())) return names;
  for (const auto& entry : fs::directory_iterator(expected_dir())) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct TemplateSource {
  bool found = false;
  std::string source;
  ordered_json special_tokens;
};

TemplateSource load_source(const std::string& name) {
  TemplateSource t;
  const std::string prefix = "tokenizer-";
  if (name.rfind(prefix, 0) == 0) {
    fs::path config = material_dir() / "tokenizers" / name.substr(prefix.size()) / "tokenizer_config.json";
    if (!fs::exists(config)) return t;
    Result<TokenizerChatConfig> chat = read_tokenizer_chat_config(ordered_json::parse(read_file(config)));
    if (!chat.ok()) return t;
    t.found = true;
    t.source = chat->chat_template;
    t.special_tokens = chat->special_tokens;
    return t;
  }
  fs::path path = material_dir() / "llama.cpp/models/templates" / (name + ".jinja");
  if (!fs::exists(path)) return t;
  t.found = true;
  t.source = read_file(path);
  t.special_tokens = conversations()["special_tokens"];
  return t;
}

// Where two renderings part, with some context, for a readable failure.
std::string first_difference(const std::string& want, const std::string& got) {
  std::size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  std::size_t from = i > 80 ? i - 80 : 0;
  std::ostringstream out;
  out << "first difference at byte " << i << "\n  jinja2:  " << ordered_json(want.substr(from, 160)).dump()
      << "\n  tessera: " << ordered_json(got.substr(from, 160)).dump();
  return out.str();
}

struct PairResult {
  bool match = false;
  std::string detail;
};

PairResult check_pair(const std::string& name, const Result<ChatTemplate>& parsed, const ordered_json& conversation,
                      const ordered_json& special_tokens) {
  const std::string conv = conversation["name"].get<std::string>();
  fs::path stem = expected_dir() / name / conv;
  bool want_error = fs::exists(stem.string() + ".error");
  Result<std::string> got = Status::internal("not rendered");
  if (parsed.ok()) {
    ordered_json context = conversation["context"];
    for (auto it = special_tokens.begin(); it != special_tokens.end(); ++it) context[it.key()] = it.value();
    ChatTemplate::RenderOptions options;
    options.now = fixed_now();
    got = parsed->render(context, options);
  } else {
    got = parsed.status();
  }
  PairResult r;
  if (want_error) {
    r.match = !got.ok();
    if (!r.match)
      r.detail = conv + ": jinja2 failed (" + read_file(stem.string() + ".error") + ") but tessera rendered";
    return r;
  }
  if (!got.ok()) {
    r.detail = conv + ": tessera failed: " + got.status().to_string();
    return r;
  }
  std::string want = read_file(stem.string() + ".txt");
  r.match = want == *got;
  if (!r.match) r.detail = conv + ": " + first_difference(want, *got);
  return r;
}

class TemplateMaterial : public ::testing::TestWithParam<std::string> {};

TEST_P(TemplateMaterial, MatchesJinja2) {
  const std::string& name = GetParam();
  TemplateSource t = load_source(name);
  if (!t.found) {
    GTEST_SKIP() << "chat template '" << name << "' not in " << material_dir()
                 << "; run scripts/fetch_test_material.sh";
  }
  Result<ChatTemplate> parsed = ChatTemplate::parse(t.source);
  for (const ordered_json& conversation : conversations()["conversations"]) {
    PairResult r = check_pair(name, parsed, conversation, t.special_tokens);
    EXPECT_TRUE(r.match) << name << " / " << r.detail;
  }
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Templates, TemplateMaterial, ::testing::ValuesIn(reference_names()), param_name);

// One line for the record: how many template x conversation pairs match, and
// which templates tessera refuses (with the construct it names).
TEST(TemplateMaterialSummary, AllPairsMatch) {
  if (!fs::is_directory(material_dir() / "llama.cpp/models/templates")) {
    GTEST_SKIP() << "test material not in " << material_dir() << "; run scripts/fetch_test_material.sh";
  }
  std::size_t pairs = 0, matched = 0, templates = 0;
  std::map<std::string, std::string> refused;
  for (const std::string& name : reference_names()) {
    TemplateSource t = load_source(name);
    if (!t.found) continue;
    ++templates;
    Result<ChatTemplate> parsed = ChatTemplate::parse(t.source);
    if (!parsed.ok() && parsed.status().kind() == ErrorKind::kUnsupported) refused[name] = parsed.status().message();
    for (const ordered_json& conversation : conversations()["conversations"]) {
      ++pairs;
      matched += check_pair(name, parsed, conversation, t.special_tokens).match;
    }
  }
  std::cout << "[ template material ] " << matched << " of " << pairs << " template x conversation pairs match jinja2 ("
            << templates << " templates x " << conversations()["conversations"].size() << " conversations)\n";
  for (const auto& [name, why] : refused) std::cout << "[ unsupported ] " << name << ": " << why << "\n";
  EXPECT_EQ(matched, pairs);
}

}  // namespace
}  // namespace tessera
