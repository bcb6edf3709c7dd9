// llama_greedy: llama.cpp's greedy continuation of token ids, through libllama's
// public API (include/llama.h), for tessera's GGUF fixtures (issue 19, point 4).
//
//   llama_greedy MODEL.gguf STEPS ID...
//   llama_greedy MODEL.gguf STEPS --text PROMPT
//   llama_greedy MODEL.gguf STEPS --special-text PROMPT
//
// Decodes the prompt ids in one batch, then STEPS greedy tokens one at a time
// (argmax of the logits, lowest id on a tie), CPU only, one thread, and prints
// the generated ids on one line separated by spaces. With --text, the prompt is
// llama.cpp's tokens of PROMPT (BOS as the file asks, no special-token parsing),
// generation stops after an end-of-generation token, and three lines are printed:
// the prompt ids, the generated ids, and the generated text as llama_detokenize
// gives it (special tokens removed). --special-text tokenizes as a rendered chat
// template is: special tokens parsed, no BOS added. Built by
// build_llama_tools.sh against the static libllama of build_llama_bench.sh's tree.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama_greedy MODEL.gguf STEPS ID...\n");
    return 2;
  }
  const int steps = std::atoi(argv[2]);
  const bool special_text = std::strcmp(argv[3], "--special-text") == 0 && argc == 5;
  const bool text_mode = special_text || (std::strcmp(argv[3], "--text") == 0 && argc == 5);
  std::vector<llama_token> ids;
  if (!text_mode)
    for (int i = 3; i < argc; ++i) ids.push_back(std::atoi(argv[i]));

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "llama_greedy: cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  if (text_mode) {
    const int32_t len = static_cast<int32_t>(std::strlen(argv[4]));
    ids.resize(len + 8);
    const int32_t n = llama_tokenize(vocab, argv[4], len, ids.data(), static_cast<int32_t>(ids.size()),
                                     /*add_special=*/!special_text, /*parse_special=*/special_text);
    if (n < 0) return 1;
    ids.resize(n);
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(ids.size() + steps + 8);
  cp.n_batch = cp.n_ctx;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  llama_context* ctx = llama_init_from_model(model, cp);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  std::vector<llama_token> out;
  llama_batch batch = llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size()));
  for (int step = 0; step < steps; ++step) {
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama_greedy: llama_decode failed at step %d\n", step);
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, -1);
    llama_token best = 0;
    for (llama_token t = 1; t < n_vocab; ++t)
      if (logits[t] > logits[best]) best = t;
    out.push_back(best);
    if (text_mode && llama_vocab_is_eog(vocab, best)) break;
    batch = llama_batch_get_one(&out.back(), 1);
  }
  if (text_mode) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
  }
  for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? " " : "", out[i]);
  std::printf("\n");
  if (text_mode) {
    std::string text(out.size() * 64 + 64, '\0');
    const int32_t n = llama_detokenize(vocab, out.data(), static_cast<int32_t>(out.size()), text.data(),
                                       static_cast<int32_t>(text.size()), true, false);
    if (n < 0) return 1;
    std::fwrite(text.data(), 1, static_cast<size_t>(n), stdout);
  }
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
