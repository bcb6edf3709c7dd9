// tokenizer_bench: encode speed of tessera's tokenizer against Hugging Face's
// tokenizers (the Rust library through its Node binding, tools/tokenizer_reference/
// encode.js), single-threaded both, on the same ~4 MB of English text (Pride and
// Prejudice + the start of the King James Bible), in one run.
//
//   tokenizer_bench [--material DIR] [--repeat N] [NAME...]
// NAME: qwen3 llama3 llama2 gemma3 deepseek_v3 gpt4o (default: all six). DIR
// defaults to $TESSERA_TEST_MATERIAL or ~/.cache/tessera-test-material (filled by
// scripts/fetch_test_material.sh); the texts go to DIR/texts as in the material test.
// For each tokenizer it prints the first (cold word cache) and best-of-N encode
// times of both and the ratio reference / tessera (above 1: tessera is faster),
// and checks that both gave the same ids. Loading time is not counted.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string run(const std::string& command, int& exit_code) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::string out;
  char buffer[4096];
  size_t n;
  while (pipe && (n = fread(buffer, 1, sizeof(buffer), pipe.get())) > 0) out.append(buffer, n);
  const int status = pipe ? pclose(pipe.release()) : -1;
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The number after "key " at the start of a line of `text`, or -1.
double field(const std::string& text, const std::string& key) {
  for (size_t at = text.find(key + " "); at != std::string::npos; at = text.find(key + " ", at + 1))
    if (at == 0 || text[at - 1] == '\n') return std::atof(text.c_str() + at + key.size() + 1);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path material;
  if (const char* env = std::getenv("TESSERA_TEST_MATERIAL"); env && *env) {
    material = env;
  } else {
    material = fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/tessera-test-material";
  }
  int repeat = 3;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--material" && i + 1 < argc) {
      material = argv[++i];
    } else if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else {
      names.push_back(arg);
    }
  }
  if (names.empty()) names = {"qwen3", "llama3", "llama2", "gemma3", "deepseek_v3", "gpt4o"};

  const fs::path pride = material / "texts/austen/prideprejudice.txt", kjv = material / "texts/kjv.txt";
  int exit_code = 0;
  if (!fs::exists(pride)) {  // the same texts as the material test, made the same way
    fs::create_directories(pride.parent_path());
    run("python3 '" + (fs::path(TESSERA_SOURCE_DIR) / "tools/tokenizer_reference/extract_austen.py").string() + "' '" +
            pride.parent_path().string() + "'",
        exit_code);
  }
  if (!fs::exists(kjv)) {
    const std::string bible = run("bible -l80 gen1:1-rev22:21 2>/dev/null", exit_code);
    if (exit_code == 0 && bible.size() > 4000000) std::ofstream(kjv, std::ios::binary) << bible;
  }
  if (!fs::exists(pride) || !fs::exists(kjv)) {
    std::fprintf(stderr,
                 "tokenizer_bench: %s or %s is absent (apt-get install r-cran-janeaustenr bible-kjv bible-kjv-text)\n",
                 pride.c_str(), kjv.c_str());
    return 2;
  }
  std::string text = slurp(pride);
  const std::string bible = slurp(kjv);
  const size_t target = 4u << 20;
  text += bible.substr(0, target > text.size() ? target - text.size() : 0);
  while (text.size() > target && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
  const fs::path text_path = fs::temp_directory_path() / "tessera_tokenizer_bench.txt";
  std::ofstream(text_path, std::ios::binary) << text;
  const fs::path script = fs::path(TESSERA_SOURCE_DIR) / "tools/tokenizer_reference/encode.js";
  const double mb = static_cast<double>(text.size()) / 1e6;

  std::printf("text: %.2f MB (Pride and Prejudice + KJV); single thread each; best of %d after a first encode\n", mb,
              repeat);
  std::printf("%-12s %9s %12s %12s %12s %12s %7s %s\n", "tokenizer", "tokens", "tessera 1st", "tessera", "ref 1st",
              "reference", "ratio", "ids");
  int failures = 0;
  for (const std::string& name : names) {
    const fs::path path = material / "tokenizers" / name / "tokenizer.json";
    auto tokenizer = tessera::Tokenizer::from_file(path.string());
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", tokenizer.status().to_string().c_str());
      ++failures;
      continue;
    }
    auto start = std::chrono::steady_clock::now();
    auto ids = tokenizer->encode(text);
    const double first = seconds_since(start);
    if (!ids.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", ids.status().to_string().c_str());
      ++failures;
      continue;
    }
    double best = 1e30;
    for (int r = 0; r < repeat; ++r) {
      start = std::chrono::steady_clock::now();
      auto again = tokenizer->encode(text);
      best = std::min(best, seconds_since(start));
    }

    const fs::path ids_path = fs::temp_directory_path() / ("tessera_tokenizer_bench_" + name + ".json");
    int exit_code = 0;
    const std::string out =
        run("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false TESSERA_TEST_MATERIAL='" + material.string() +
                "' node '" + script.string() + "' '" + path.string() + "' '" + text_path.string() + "' --repeat " +
                std::to_string(repeat) + " --out '" + ids_path.string() + "' 2>&1",
            exit_code);
    const double ref_first = field(out, "first_encode_seconds"), ref_best = field(out, "encode_seconds");
    bool same = false;
    if (exit_code == 0 && fs::exists(ids_path))
      same = nlohmann::json::parse(slurp(ids_path)).get<std::vector<int32_t>>() == *ids;
    if (exit_code != 0 || ref_best <= 0) {
      std::printf("%-12s %9zu %11.3fs %11.3fs %12s %12s %7s %s\n", name.c_str(), ids->size(), first, best, "-", "-",
                  "-", "reference failed");
      ++failures;
      continue;
    }
    std::printf("%-12s %9zu %11.3fs %11.3fs %11.3fs %11.3fs %6.2fx %s\n", name.c_str(), ids->size(), first, best,
                ref_first, ref_best, ref_best / best, same ? "same" : "DIFFERENT");
    std::fflush(stdout);
    if (!same) ++failures;
  }
  std::printf("ratio = reference time / tessera time (best of %d); MB/s = %.2f MB / time\n", repeat, mb);
  return failures == 0 ? 0 : 1;
}
