// Writes the seed corpus of wire_control_fuzz with the project's own encoders:
// control frames as a coordinator and stages send them (setup with a shipping
// manifest, start, cancel, error), each small (< 4 KiB).
//   make_control_corpus DIR   (DIR is fuzz/corpus; one subfolder per target)
// A plain program (no gtest); built by fuzz/CMakeLists.txt. Deterministic.
#include <cstdio>
#include <vector>

#include "corpus_writer.h"
#include "wire/control_frame.h"
#include "wire/prefix_message.h"
#include "wire/start_message.h"

int main(int argc, char** argv) {
  using namespace tessera;
  using namespace tessera::wire;
  using json = nlohmann::json;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s fuzz/corpus\n", argv[0]);
    return 2;
  }
  const fuzzing::CorpusWriter corpus(argv[1]);
  const json manifest = json::parse(json{
      {"config", {{"num_hidden_layers", 2}}},
      {"tensors",
       {{"model.embed_tokens.weight", "BF16", {16, 8}, 0}, {"model.layers.0.input_layernorm.weight", "BF16", {8}, 1}}}}
                                        .dump());
  auto setup = [](const json& ship) {
    return encode_control(0, {{"type", "setup"},
                              {"model", ""},
                              {"begin", 0},
                              {"end", 1},
                              {"next", "stage1"},
                              {"session", 77},
                              {"context", 64},
                              {"plain", false},
                              {"ship", ship}});
  };
  corpus.write("wire_control_fuzz", "setup_ship", setup(manifest));
  // A GGUF's blocks (issue 19, point 7): a Q4_K_M layer's f32 norm, q4_k and q6_k matrices in one group.
  const json blocks = json::parse(json{{"config", {{"num_hidden_layers", 2}}},
                                       {"tensors",
                                        {{"model.embed_tokens.weight", "Q8_0", {16, 64}, 0},
                                         {"model.layers.0.input_layernorm.weight", "F32", {256}, 1},
                                         {"model.layers.0.self_attn.q_proj.weight", "Q4_K", {256, 256}, 1},
                                         {"model.layers.0.self_attn.v_proj.weight", "Q6_K", {64, 256}, 1}}}}
                                      .dump());
  corpus.write("wire_control_fuzz", "setup_ship_blocks", setup(blocks));
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 40;
  params.repetition_penalty = 1.2f;
  params.logit_bias = {{3, -100.0f}};
  const std::vector<int32_t> prompt = {1, 5, 9, 2};
  corpus.write("wire_control_fuzz", "start", encode_control(5, start_message(params, prompt)));
  const std::vector<int32_t> output = {7, 7, 3};
  corpus.write("wire_control_fuzz", "start_resume", encode_control(5, start_message(params, prompt, output)));
  corpus.write("wire_control_fuzz", "preempted", encode_control(5, {{"type", "preempted"}, {"stage", "stage1"}}));
  corpus.write("wire_control_fuzz", "cancel", encode_control(5, {{"type", "cancel"}}));
  const std::vector<BlockDigest> chain = {BlockDigest{1, 2, 3}, BlockDigest{4, 5, 6}};
  corpus.write("wire_control_fuzz", "prefix", encode_control(5, prefix_query(chain)));
  corpus.write("wire_control_fuzz", "prefix_reply", encode_control(5, prefix_reply(1)));
  corpus.write("wire_control_fuzz", "blocks", encode_control(5, blocks_message(1, chain)));
  corpus.write("wire_control_fuzz", "heartbeat_kv", encode_control(0, heartbeat_message(KvUsage{64, 9})));
  corpus.write("wire_control_fuzz", "error",
               encode_control(5, error_message("stage1", Status::invalid_input("token_ids axis 0: 0 < min 1"))));
  corpus.write("wire_control_fuzz", "error_timed_out",
               encode_control(0, error_message("stage2", Status::disconnected("next stage silent", Cause::kTimedOut))));
  return 0;
}
