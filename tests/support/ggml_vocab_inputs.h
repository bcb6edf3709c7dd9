// llama.cpp's tokenizer test vectors (ggml-vocab-*.gguf.inp): the input texts,
// separated by a marker line. Shared by the tests that read them (the
// tokenizer.json material test and the GGUF vocabulary test).
#pragma once

#include <string>
#include <vector>

namespace tessera::testing {

inline std::vector<std::string> split_ggml_vocab_inputs(const std::string& raw) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return texts;
}

}  // namespace tessera::testing
