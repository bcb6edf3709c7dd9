// The step scheduler on real checkpoints: a prompt run in chunks, or a sequence
// stepped beside others, gets bitwise the output it gets in one pass alone;
// cancelling a sequence in any state frees its blocks; the queue and the number
// of open sequences are bounded; a feed that cannot run fails only its own
// sequence; each sequence samples with its own sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>

#include "engine/scheduler.h"
#include "engine/sequence_runner.h"
#include "model/fixtures.h"
#include "model/forward.h"

namespace tessera {
namespace {

using testing::fixture_dir;

// Enough for every test here; the default (a quarter of the host's memory) is slow to map.
constexpr uint64_t kKvMemory = uint64_t{16} << 20;

std::vector<int32_t> make_prompt(int64_t n, int32_t first, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((first + 53 * i) % (vocab - 3) + 3));
  return ids;
}

SamplingParams sampling(float temperature, uint64_t seed) {
  SamplingParams params;
  params.temperature = temperature;
  params.seed = seed;
  return params;
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// More steps than any test needs: a scheduler that stops making progress fails, not hangs.
constexpr int kMaxSteps = 1000;

// Every output until the scheduler has no work (or kMaxSteps), by sequence.
std::map<uint64_t, StepOutput> drain(Scheduler& scheduler) {
  std::map<uint64_t, StepOutput> outputs;
  for (int step = 0; step < kMaxSteps && scheduler.has_work(); ++step)
    for (StepOutput& out : scheduler.step()) outputs[out.id] = std::move(out);
  EXPECT_FALSE(scheduler.has_work());
  return outputs;
}

// Steps until `id` has an output; fails the test on another sequence's error.
// `steps` counts the steps taken.
StepOutput step_until(Scheduler& scheduler, uint64_t id, int* steps = nullptr) {
  for (int step = 0; step < kMaxSteps && scheduler.has_work(); ++step) {
    if (steps) ++*steps;
    for (StepOutput& out : scheduler.step())
      if (out.id == id) return std::move(out);
  }
  ADD_FAILURE() << "no output for sequence " << id;
  StepOutput none;
  none.id = id;
  none.status = Status::internal("no output");
  return none;
}

// The logits of a prompt's last token, then of `decode` greedy steps, with
// prompts chunked by `max_step_tokens`; `prompt_steps` gets the steps the prompt took.
std::vector<std::vector<float>> run_alone(Forward& forward, std::span<const int32_t> prompt, int decode,
                                          int64_t max_step_tokens, int* prompt_steps = nullptr) {
  Scheduler scheduler(forward, {.max_step_tokens = max_step_tokens});
  EXPECT_TRUE(scheduler.open(1, 128).ok());
  EXPECT_TRUE(scheduler.feed_ids(1, std::vector<int32_t>(prompt.begin(), prompt.end())).ok());
  std::vector<std::vector<float>> logits;
  for (int i = 0; i <= decode; ++i) {
    StepOutput out = step_until(scheduler, 1, i == 0 ? prompt_steps : nullptr);
    EXPECT_TRUE(out.status.ok()) << out.status.to_string();
    if (!out.status.ok()) break;
    logits.push_back(std::move(out.values));
    if (i < decode) {
      EXPECT_TRUE(scheduler.feed_ids(1, {argmax(logits.back())}).ok());
    }
  }
  return logits;
}

class ChunkedPrefillTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChunkedPrefillTest, PromptInChunksGivesBitwiseTheLogitsOfOnePass) {
  auto model = Model::load(fixture_dir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto device = make_cpu_device(2);
  Forward forward(*model, *device, {.kv_memory = kKvMemory, .kv_block_size = 4});
  const std::vector<int32_t> prompt = make_prompt(20, 7, model->config().vocab_size);
  int one_pass_steps = 0;
  const auto expected = run_alone(forward, prompt, 5, 512, &one_pass_steps);
  ASSERT_EQ(expected.size(), 6u);
  EXPECT_EQ(one_pass_steps, 1);
  for (const int64_t chunk : {3, 7}) {
    int steps = 0;
    const auto chunked = run_alone(forward, prompt, 5, chunk, &steps);
    EXPECT_EQ(steps, (20 + chunk - 1) / chunk) << "chunks of " << chunk;
    ASSERT_EQ(chunked.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_EQ(chunked[i], expected[i]) << "chunks of " << chunk << ", output " << i;
  }
  EXPECT_EQ(forward.kv_pool().free_blocks(), forward.kv_pool().total_blocks());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChunkedPrefillTest,
                         ::testing::Values("llama3_f32", "qwen3_bf16", "mistral_f32", testing::kShippedModel),
                         [](const auto& info) { return testing::test_name(info.param); });

// Eight sequences of prompts 3..17 tokens, fed at different steps so that
// prompt chunks and decode steps share steps, each get bitwise the logits they
// get alone.
TEST(SchedulerBatchTest, SequenceSteppedWithSevenOthersGetsBitwiseItsLogitsAlone) {
  auto model = Model::load(fixture_dir("llama3_f32"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto device = make_cpu_device(2);
  Forward forward(*model, *device, {.kv_memory = kKvMemory, .kv_block_size = 4});
  const int64_t vocab = model->config().vocab_size;
  constexpr int kSequences = 8, kDecode = 6;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<std::vector<float>>> alone;
  for (int s = 0; s < kSequences; ++s) {
    prompts.push_back(make_prompt(3 + 2 * s, 11 * s + 1, vocab));
    alone.push_back(run_alone(forward, prompts[s], kDecode, 512));
  }

  Scheduler scheduler(forward, {.max_step_tokens = 10});
  std::vector<std::vector<std::vector<float>>> together(kSequences);
  for (int s = 0; s < kSequences; ++s) ASSERT_TRUE(scheduler.open(s, 128).ok());
  for (int step = 0; step < 200; ++step) {
    if (step < kSequences) {
      ASSERT_TRUE(scheduler.feed_ids(step, prompts[step]).ok());  // one joins per step
    }
    if (!scheduler.has_work()) break;
    for (StepOutput& out : scheduler.step()) {
      ASSERT_TRUE(out.status.ok()) << out.status.to_string();
      auto& outputs = together[out.id];
      outputs.push_back(std::move(out.values));
      if (outputs.size() <= kDecode) {
        ASSERT_TRUE(scheduler.feed_ids(out.id, {argmax(outputs.back())}).ok());
      }
    }
  }
  EXPECT_GE(scheduler.largest_step(), 2u);
  for (int s = 0; s < kSequences; ++s) {
    ASSERT_EQ(together[s].size(), static_cast<size_t>(kDecode + 1)) << "sequence " << s;
    for (size_t i = 0; i < together[s].size(); ++i)
      EXPECT_EQ(together[s][i], alone[s][i]) << "sequence " << s << ", output " << i;
  }
}

// llama2_mqa_f32 split in three: the middle range returns the hidden states of
// every token, and the last range the logits, the same whether a feed runs in
// one step or in chunks (and the same as Forward run directly).
TEST(SchedulerHiddenTest, HiddenStateRangeGivesTheSameOutputChunkedAndUnchunked) {
  const std::string dir = fixture_dir("llama2_mqa_f32");
  auto whole = Model::load(dir);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const int64_t layers = whole->config().num_hidden_layers;
  ASSERT_GE(layers, 3);
  auto head = Model::load(dir, LayerRange{0, 1});
  auto middle = Model::load(dir, LayerRange{1, 2});
  auto tail = Model::load(dir, LayerRange{1, layers});
  ASSERT_TRUE(head.ok() && middle.ok() && tail.ok());
  auto device = make_cpu_device(2);
  Forward head_forward(*head, *device, {.kv_memory = kKvMemory}),
      whole_forward(*whole, *device, {.kv_memory = kKvMemory});
  Forward middle_forward(*middle, *device, {.kv_memory = kKvMemory, .kv_block_size = 4}),
      tail_forward(*tail, *device, {.kv_memory = kKvMemory, .kv_block_size = 4});

  const std::vector<int32_t> prompt = make_prompt(17, 5, whole->config().vocab_size);
  KvCache head_cache = head_forward.make_cache(64), whole_cache = whole_forward.make_cache(64);
  auto hidden = head_forward.run_ids(prompt, head_cache);
  auto logits = whole_forward.run_ids(prompt, whole_cache);
  ASSERT_TRUE(hidden.ok() && logits.ok());
  const auto hidden_size = static_cast<size_t>(whole->config().hidden_size);
  ASSERT_EQ(hidden->size(), prompt.size() * hidden_size);

  KvCache direct_cache = middle_forward.make_cache(64);
  auto middle_direct = middle_forward.run_hidden(*hidden, direct_cache);
  ASSERT_TRUE(middle_direct.ok());

  for (const int64_t chunk : {512, 3, 5}) {
    for (Forward* forward : {&middle_forward, &tail_forward}) {
      Scheduler scheduler(*forward, {.max_step_tokens = chunk});
      ASSERT_TRUE(scheduler.open(1, 64).ok());
      ASSERT_TRUE(scheduler.feed_hidden(1, *hidden).ok());
      int steps = 0;
      StepOutput out = step_until(scheduler, 1, &steps);
      ASSERT_TRUE(out.status.ok()) << out.status.to_string();
      EXPECT_EQ(steps, (17 + chunk - 1) / chunk);
      if (forward == &middle_forward) {
        EXPECT_EQ(out.values, *middle_direct) << "middle range, chunks of " << chunk;
      } else {
        EXPECT_EQ(out.values, *logits) << "last range, chunks of " << chunk;
      }
    }
  }
  EXPECT_EQ(tail_forward.kv_pool().free_blocks(), tail_forward.kv_pool().total_blocks());
}

class SchedulerTest : public testing::Llama3Test {
 protected:
  void SetUp() override {
    Llama3Test::SetUp();
    if (model_) vocab_ = model_->config().vocab_size;
  }
  // A Forward with a pool of `blocks` blocks of 4 positions.
  std::unique_ptr<Forward> make_forward(int64_t blocks) {
    const ModelConfig& c = model_->config();
    const auto block_bytes =
        static_cast<uint64_t>(c.num_hidden_layers * 2 * c.num_key_value_heads * c.head_dim * 4) * sizeof(float);
    auto forward = std::make_unique<Forward>(*model_, *device_,
                                             ForwardOptions{.kv_memory = blocks * block_bytes, .kv_block_size = 4});
    EXPECT_EQ(forward->kv_pool().total_blocks(), blocks);
    return forward;
  }
  std::vector<int32_t> prompt(int64_t n, int32_t first = 1) const { return make_prompt(n, first, vocab_); }
  // A pool of 4 blocks full: sequence 1 holds 3 (10 positions), sequence 2 (newer) the last (4 positions).
  void fill_pool(Scheduler& scheduler, const Forward& forward) const {
    ASSERT_TRUE(scheduler.open(1, 64).ok());
    ASSERT_TRUE(scheduler.feed_ids(1, prompt(10)).ok());
    ASSERT_TRUE(step_until(scheduler, 1).status.ok());
    ASSERT_TRUE(scheduler.open(2, 64).ok());
    ASSERT_TRUE(scheduler.feed_ids(2, prompt(4, 5)).ok());
    ASSERT_TRUE(step_until(scheduler, 2).status.ok());
    ASSERT_EQ(forward.kv_pool().free_blocks(), 0);
  }

  int64_t vocab_ = 0;
};

// Sequence 1 is cancelled in each state, beside sequence 2 which holds blocks
// throughout; after each cancel the pool has what it had before sequence 1 was
// opened, nothing is left queued, and sequence 2 still runs.
TEST_F(SchedulerTest, CancelInEveryStateFreesTheSequencesBlocks) {
  auto forward = make_forward(64);
  KvPool& pool = forward->kv_pool();
  Scheduler scheduler(*forward, {.max_step_tokens = 4});
  ASSERT_TRUE(scheduler.open(2, 128).ok());
  ASSERT_TRUE(scheduler.feed_ids(2, prompt(6, 9)).ok());
  ASSERT_TRUE(step_until(scheduler, 2).status.ok());

  enum State { kOpened, kQueued, kMidPrefill, kDecoding, kFinished, kSampling };
  for (const State state : {kOpened, kQueued, kMidPrefill, kDecoding, kFinished, kSampling}) {
    SCOPED_TRACE(state);
    const int64_t before = pool.free_blocks();
    ASSERT_LT(before, pool.total_blocks());
    ASSERT_TRUE(scheduler.open(1, 128).ok());
    if (state == kSampling) {
      ASSERT_TRUE(scheduler.start(1, sampling(0.7f, 3), prompt(10)).ok());
    }
    if (state != kOpened) {
      ASSERT_TRUE(scheduler.feed_ids(1, prompt(10)).ok());
    }
    if (state == kMidPrefill) {
      EXPECT_TRUE(scheduler.step().empty());  // 4 of the 10 tokens
      EXPECT_EQ(scheduler.length(1), 4);
      EXPECT_EQ(pool.free_blocks(), before - 1);
    }
    if (state == kDecoding || state == kFinished || state == kSampling) {
      StepOutput out = step_until(scheduler, 1);
      ASSERT_TRUE(out.status.ok()) << out.status.to_string();
      ASSERT_TRUE(scheduler.feed_ids(1, {state == kSampling ? out.token : argmax(out.values)}).ok());
      ASSERT_TRUE(step_until(scheduler, 1).status.ok());
      EXPECT_EQ(scheduler.length(1), 11);
      EXPECT_EQ(pool.free_blocks(), before - 3);
      if (state != kFinished) {
        ASSERT_TRUE(scheduler.feed_ids(1, {5}).ok());  // the next decode step, queued
      }
    }
    scheduler.cancel(1);
    EXPECT_FALSE(scheduler.is_open(1));
    EXPECT_EQ(pool.free_blocks(), before);
    EXPECT_FALSE(scheduler.has_work());
    EXPECT_TRUE(scheduler.step().empty());

    const int64_t length = scheduler.length(2);
    ASSERT_TRUE(scheduler.feed_ids(2, {4}).ok());
    EXPECT_TRUE(step_until(scheduler, 2).status.ok());
    EXPECT_EQ(scheduler.length(2), length + 1);
  }
  scheduler.cancel_all();
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks());
  EXPECT_EQ(scheduler.open_sequences(), 0u);
}

TEST_F(SchedulerTest, ThirdQueuedFeedIsOverloadedAndOthersGoOn) {
  auto forward = make_forward(64);
  Scheduler scheduler(*forward, {.max_queued_feeds = 2});
  ASSERT_TRUE(scheduler.open(1, 64).ok());
  ASSERT_TRUE(scheduler.open(2, 64).ok());
  ASSERT_TRUE(scheduler.feed_ids(1, prompt(3)).ok());
  ASSERT_TRUE(scheduler.feed_ids(2, prompt(4)).ok());
  const Status third = scheduler.feed_ids(1, {7});
  EXPECT_EQ(third.kind(), ErrorKind::kOverloaded) << third.to_string();
  EXPECT_EQ(scheduler.feed_ids(2, {7}).kind(), ErrorKind::kOverloaded);
  EXPECT_TRUE(scheduler.is_open(1) && scheduler.is_open(2));  // refused, not failed

  std::map<uint64_t, StepOutput> outputs = drain(scheduler);
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_TRUE(outputs[1].status.ok() && outputs[2].status.ok());
  EXPECT_EQ(scheduler.length(1), 3);  // the refused feed was not queued
  EXPECT_EQ(scheduler.length(2), 4);
  EXPECT_TRUE(scheduler.feed_ids(1, {7}).ok());  // room again
  EXPECT_TRUE(scheduler.feed_ids(2, {7}).ok());
}

// What a stage's bound on waiting input counts (StageOptions::max_queued_bytes):
// the bytes of the inputs queued and not yet fully run, released as each feed
// finishes, is cancelled or all are (fails with the accounting left out of
// step or close: the count stays above zero; checked).
TEST_F(SchedulerTest, QueuedBytesCountEveryWaitingInputUntilItRunsOrIsCancelled) {
  auto forward = make_forward(64);
  Scheduler scheduler(*forward, {.max_step_tokens = 4});
  ASSERT_TRUE(scheduler.open(1, 64).ok());
  ASSERT_TRUE(scheduler.open(2, 64).ok());
  ASSERT_TRUE(scheduler.feed_ids(1, prompt(6)).ok());
  ASSERT_TRUE(scheduler.feed_ids(1, {7}).ok());
  ASSERT_TRUE(scheduler.feed_ids(2, prompt(3)).ok());
  EXPECT_EQ(scheduler.queued_feeds(), 3u);
  EXPECT_EQ(scheduler.queued_bytes(), 10 * sizeof(int32_t));
  (void)scheduler.step();  // 4 of sequence 1's first 6 tokens: nothing finished
  EXPECT_EQ(scheduler.queued_bytes(), 10 * sizeof(int32_t));
  scheduler.cancel(2);
  EXPECT_EQ(scheduler.queued_bytes(), 7 * sizeof(int32_t));
  drain(scheduler);
  EXPECT_EQ(scheduler.queued_feeds(), 0u);
  EXPECT_EQ(scheduler.queued_bytes(), 0u);
  ASSERT_TRUE(scheduler.feed_ids(1, prompt(2)).ok());
  scheduler.cancel_all();
  EXPECT_EQ(scheduler.queued_bytes(), 0u);
}

TEST_F(SchedulerTest, OpenBeyondMaxSequencesIsOverloadedAndOthersGoOn) {
  auto forward = make_forward(64);
  Scheduler scheduler(*forward, {.max_sequences = 1});
  ASSERT_TRUE(scheduler.open(1, 64).ok());
  const Status second = scheduler.open(2, 64);
  EXPECT_EQ(second.kind(), ErrorKind::kOverloaded) << second.to_string();
  EXPECT_FALSE(scheduler.is_open(2));
  ASSERT_TRUE(scheduler.feed_ids(1, prompt(3)).ok());
  EXPECT_TRUE(step_until(scheduler, 1).status.ok());
  scheduler.cancel(1);
  EXPECT_TRUE(scheduler.open(2, 64).ok());
}

// A 20-token feed needs 5 blocks of a 4-block pool: it fails alone, with
// kOverloaded naming the budget; the small sequence beside it goes on.
TEST_F(SchedulerTest, FeedThatCannotGetBlocksEvenAloneFailsOnlyItsSequence) {
  auto forward = make_forward(4);
  KvPool& pool = forward->kv_pool();
  Scheduler scheduler(*forward);
  ASSERT_TRUE(scheduler.open(1, 64).ok());
  ASSERT_TRUE(scheduler.open(2, 64).ok());
  ASSERT_TRUE(scheduler.feed_ids(1, prompt(3)).ok());
  ASSERT_TRUE(scheduler.feed_ids(2, prompt(20)).ok());
  std::map<uint64_t, StepOutput> outputs = drain(scheduler);
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_TRUE(outputs[1].status.ok()) << outputs[1].status.to_string();
  EXPECT_EQ(outputs[2].status.kind(), ErrorKind::kOverloaded) << outputs[2].status.to_string();
  EXPECT_NE(outputs[2].status.message().find("--kv-memory"), std::string::npos) << outputs[2].status.message();
  EXPECT_FALSE(scheduler.is_open(2));
  EXPECT_TRUE(scheduler.is_open(1));
  EXPECT_EQ(pool.free_blocks(), 3);  // only sequence 1's block is held
  ASSERT_TRUE(scheduler.feed_ids(1, {9}).ok());
  EXPECT_TRUE(step_until(scheduler, 1).status.ok());
  EXPECT_EQ(scheduler.length(1), 4);
}

TEST_F(SchedulerTest, FeedBeyondCapacityFailsOnlyItsSequenceNamingCapacity) {
  auto forward = make_forward(64);
  Scheduler scheduler(*forward);
  ASSERT_TRUE(scheduler.open(1, 64).ok());
  ASSERT_TRUE(scheduler.open(2, 5).ok());
  ASSERT_TRUE(scheduler.feed_ids(1, prompt(3)).ok());
  ASSERT_TRUE(scheduler.feed_ids(2, prompt(6)).ok());
  std::map<uint64_t, StepOutput> outputs;
  for (StepOutput& out : scheduler.step()) outputs[out.id] = std::move(out);  // one step: both
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_TRUE(outputs[1].status.ok()) << outputs[1].status.to_string();
  EXPECT_EQ(outputs[2].status.kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(outputs[2].status.message().find("capacity of 5"), std::string::npos) << outputs[2].status.message();
  EXPECT_FALSE(scheduler.is_open(2));
  EXPECT_FALSE(scheduler.has_work());
  EXPECT_EQ(forward->kv_pool().free_blocks(), 63);
}

TEST_F(SchedulerTest, BadTokenIdFailsAtFeedNamingTheId) {
  auto forward = make_forward(64);
  Scheduler scheduler(*forward);
  ASSERT_TRUE(scheduler.open(1, 64).ok());
  ASSERT_TRUE(scheduler.open(2, 64).ok());
  ASSERT_TRUE(scheduler.feed_ids(2, prompt(3)).ok());
  for (const int32_t bad : {static_cast<int32_t>(vocab_), -1}) {
    const Status status = scheduler.feed_ids(1, {1, 2, bad});
    EXPECT_EQ(status.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(status.message().find("token id " + std::to_string(bad)), std::string::npos) << status.message();
  }
  EXPECT_TRUE(scheduler.is_open(1));  // nothing was queued for it
  StepOutput out = step_until(scheduler, 2);
  EXPECT_TRUE(out.status.ok());
  EXPECT_FALSE(scheduler.has_work());
  EXPECT_EQ(scheduler.length(1), 0);
  EXPECT_TRUE(scheduler.feed_ids(1, {1, 2}).ok());
}

// A seeded temperature sampler started on a sequence gives the tokens LocalRunner
// gives alone with the same parameters, also when three other sequences with
// their own samplers (one with the same seed) are stepped beside it.
TEST_F(SchedulerTest, PerSequenceSamplerGivesTheTokensOfLocalRunnerAlone) {
  auto forward = make_forward(256);
  SamplingParams params = sampling(1.3f, 77);
  params.top_k = 50;
  const std::vector<int32_t> request = prompt(9, 4);
  constexpr int kTokens = 12;

  std::vector<int32_t> expected;
  {
    Scheduler scheduler(*forward);
    LocalRunner runner(scheduler, 128, params);
    std::vector<int32_t> ids = request;
    for (int i = 0; i < kTokens; ++i) {
      auto token = runner.run_to_token(ids, request);
      ASSERT_TRUE(token.ok()) << token.status().to_string();
      expected.push_back(*token);
      ids = {*token};
    }
  }

  Scheduler scheduler(*forward, {.max_step_tokens = 6});
  const std::map<uint64_t, std::pair<uint64_t, std::vector<int32_t>>> requests = {
      {1, {77, request}}, {2, {5, prompt(4, 8)}}, {3, {77, request}}, {4, {6, prompt(13, 2)}}};
  for (const auto& [id, r] : requests) {
    SamplingParams p = params;
    p.seed = r.first;
    ASSERT_TRUE(scheduler.open(id, 128).ok());
    ASSERT_TRUE(scheduler.start(id, p, r.second).ok());
  }
  std::map<uint64_t, std::vector<int32_t>> tokens;
  for (int step = 0; step < 200 && (step < 4 || scheduler.has_work()); ++step) {
    if (step < 4) {
      ASSERT_TRUE(scheduler.feed_ids(step + 1, requests.at(step + 1).second).ok());  // staggered
    }
    for (const StepOutput& out : scheduler.step()) {
      ASSERT_TRUE(out.status.ok()) << out.status.to_string();
      EXPECT_TRUE(out.values.empty());  // a sampling sequence yields tokens
      tokens[out.id].push_back(out.token);
      if (tokens[out.id].size() < kTokens) {
        ASSERT_TRUE(scheduler.feed_ids(out.id, {out.token}).ok());
      }
    }
  }
  EXPECT_GE(scheduler.largest_step(), 2u);
  EXPECT_EQ(tokens[1], expected);
  EXPECT_EQ(tokens[3], expected);  // the same seed, its own generator
  EXPECT_NE(tokens[2], expected);
  // The draws are not greedy: greedy from the same prompt differs.
  const auto greedy = run_alone(*forward, request, kTokens - 1, 512);
  std::vector<int32_t> greedy_tokens;
  for (const auto& logits : greedy) greedy_tokens.push_back(argmax(logits));
  EXPECT_NE(greedy_tokens, expected);
}

// step(meanwhile), as the server runs it: `meanwhile` runs once a step (a step
// that runs nothing too), on the CPU before the pass (its threads compute in
// the calls, so the work it does is not held back by a pass), and each sequence
// gets bitwise the tokens step() gives it alone, greedy or seeded.
TEST_F(SchedulerTest, MeanwhileRunsOnceAStepBeforeTheCpusPassAndChangesNoToken) {
  auto forward = make_forward(256);
  ASSERT_TRUE(device_->computes_in_calls());
  constexpr size_t kTokens = 8;
  struct Request {
    uint64_t id;
    float temperature;  // 0: greedy
    std::vector<int32_t> prompt;
  };
  const std::vector<Request> requests = {{1, 0, prompt(9, 4)}, {2, 0, prompt(5, 8)}, {3, 1.3f, prompt(6, 3)}};
  auto start = [&](Scheduler& scheduler, const Request& r) {
    ASSERT_TRUE(scheduler.open(r.id, 128).ok());
    ASSERT_TRUE(scheduler.start(r.id, sampling(r.temperature, 40 + r.id), r.prompt).ok());
    ASSERT_TRUE(scheduler.feed_ids(r.id, r.prompt).ok());
  };
  std::map<uint64_t, std::vector<int32_t>> alone;
  for (const Request& r : requests) {
    Scheduler scheduler(*forward);
    start(scheduler, r);
    while (alone[r.id].size() < kTokens) {
      const StepOutput out = step_until(scheduler, r.id);
      ASSERT_TRUE(out.status.ok()) << out.status.to_string();
      alone[r.id].push_back(out.token);
      ASSERT_TRUE(scheduler.feed_ids(r.id, {out.token}).ok());
    }
  }

  Scheduler scheduler(*forward, {.max_step_tokens = 8});
  for (const Request& r : requests) start(scheduler, r);
  std::map<uint64_t, std::vector<int32_t>> together;
  for (int step = 0; step < 200 && scheduler.has_work(); ++step) {
    std::map<uint64_t, int64_t> lengths;
    for (const Request& r : requests) lengths[r.id] = scheduler.length(r.id);
    int calls = 0;
    const std::vector<StepOutput> outputs = scheduler.step([&] {
      ++calls;
      for (const auto& [id, length] : lengths) EXPECT_EQ(scheduler.length(id), length) << "the pass ran first";
    });
    EXPECT_EQ(calls, 1);
    for (const StepOutput& out : outputs) {
      ASSERT_TRUE(out.status.ok()) << out.status.to_string();
      together[out.id].push_back(out.token);
      if (together[out.id].size() < kTokens) {
        ASSERT_TRUE(scheduler.feed_ids(out.id, {out.token}).ok());
      }
    }
  }
  int calls = 0;
  EXPECT_TRUE(scheduler.step([&] { ++calls; }).empty());
  EXPECT_EQ(calls, 1);
  EXPECT_GE(scheduler.largest_step(), 3u);
  for (const Request& r : requests) EXPECT_EQ(together[r.id], alone[r.id]) << "sequence " << r.id;
  EXPECT_NE(alone[3], alone[1]);
}

// Recompute preemption: three sequences that each grow to 4 blocks share a pool
// of 8, so the older ones take the newest one's blocks; it runs its ids again
// later. Each gets bitwise the tokens it gets alone (greedy and seeded
// sampling), nothing fails, and the pool is whole again at the end.
TEST_F(SchedulerTest, PreemptedSequenceGetsBitwiseTheTokensOfAnUninterruptedRun) {
  auto forward = make_forward(8);
  constexpr int kTokens = 9;  // 6 prompt ids + 9 tokens: 15 positions, 4 blocks of 4
  const std::vector<std::pair<std::vector<int32_t>, SamplingParams>> requests = {
      {prompt(6, 3), sampling(0, 0)}, {prompt(6, 7), sampling(1.1f, 5)}, {prompt(6, 11), sampling(0.9f, 9)}};

  auto alone = [&](const std::vector<int32_t>& request, const SamplingParams& params) {
    Scheduler scheduler(*forward);
    LocalRunner runner(scheduler, 64, params);
    std::vector<int32_t> ids = request, tokens;
    for (int i = 0; i < kTokens; ++i) {
      auto token = runner.run_to_token(ids, request);
      EXPECT_TRUE(token.ok()) << token.status().to_string();
      if (!token.ok()) break;
      tokens.push_back(*token);
      ids = {*token};
    }
    return tokens;
  };
  std::vector<std::vector<int32_t>> expected;
  for (const auto& [request, params] : requests) expected.push_back(alone(request, params));

  Scheduler scheduler(*forward, {.preemption = true});
  for (uint64_t id = 1; id <= requests.size(); ++id) {
    ASSERT_TRUE(scheduler.open(id, 64).ok());
    ASSERT_TRUE(scheduler.start(id, requests[id - 1].second, requests[id - 1].first).ok());
    ASSERT_TRUE(scheduler.feed_ids(id, requests[id - 1].first).ok());
  }
  std::map<uint64_t, std::vector<int32_t>> tokens;
  for (int step = 0; step < kMaxSteps && scheduler.has_work(); ++step) {
    for (const StepOutput& out : scheduler.step()) {
      ASSERT_TRUE(out.status.ok()) << "sequence " << out.id << ": " << out.status.to_string();
      tokens[out.id].push_back(out.token);
      if (tokens[out.id].size() < kTokens) {
        ASSERT_TRUE(scheduler.feed_ids(out.id, {out.token}).ok());
      } else {
        scheduler.cancel(out.id);  // done: its blocks return, as the server's finished requests do
      }
    }
  }
  EXPECT_GE(scheduler.preemptions(), 1u);
  for (uint64_t id = 1; id <= requests.size(); ++id) EXPECT_EQ(tokens[id], expected[id - 1]) << "sequence " << id;
  EXPECT_EQ(forward->kv_pool().free_blocks(), 8);
}

// The oldest sequence is never preempted for a newer one: the newer waits (and
// is preempted itself when the older needs its blocks), and a feed that not even
// the whole pool holds fails alone, naming the budget.
TEST_F(SchedulerTest, PreemptionTakesOnlyNewerSequencesAndRefusesWhatThePoolCannotHold) {
  auto forward = make_forward(4);
  Scheduler scheduler(*forward, {.preemption = true});
  ASSERT_NO_FATAL_FAILURE(fill_pool(scheduler, *forward));
  // Sequence 1 grows into a fourth block: sequence 2 (newer) gives its block up.
  ASSERT_TRUE(scheduler.feed_ids(1, {5, 6, 7}).ok());
  ASSERT_TRUE(step_until(scheduler, 1).status.ok());
  EXPECT_EQ(scheduler.preemptions(), 1u);
  EXPECT_EQ(scheduler.length(1), 13);
  EXPECT_EQ(scheduler.length(2), 4) << "a preempted sequence still holds its ids, to run again";
  EXPECT_EQ(scheduler.held_sequences(), 1u) << "the preempted one waits";
  // Sequence 2's next feed waits for blocks while sequence 1 runs; it never takes sequence 1's.
  ASSERT_TRUE(scheduler.feed_ids(2, {8}).ok());
  ASSERT_TRUE(scheduler.feed_ids(1, {9}).ok());
  const std::vector<StepOutput> outputs = scheduler.step();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].id, 1u);
  EXPECT_TRUE(outputs[0].status.ok()) << outputs[0].status.to_string();
  EXPECT_EQ(scheduler.length(1), 14);
  EXPECT_EQ(scheduler.preemptions(), 1u);
  EXPECT_EQ(scheduler.held_sequences(), 1u);
  scheduler.cancel(1);  // blocks free: it runs its 4 ids again, then the new one
  const StepOutput out = step_until(scheduler, 2);
  EXPECT_TRUE(out.status.ok()) << out.status.to_string();
  EXPECT_EQ(scheduler.length(2), 5);
  EXPECT_EQ(scheduler.held_sequences(), 0u) << "it ran";
  // 17 positions need 5 blocks: more than the pool has.
  ASSERT_TRUE(scheduler.open(3, 64).ok());
  ASSERT_TRUE(scheduler.feed_ids(3, prompt(17)).ok());
  const StepOutput refused = step_until(scheduler, 3);
  EXPECT_EQ(refused.status.kind(), ErrorKind::kOverloaded) << refused.status.to_string();
  EXPECT_NE(refused.status.message().find("--kv-memory"), std::string::npos) << refused.status.message();
  EXPECT_TRUE(scheduler.is_open(2));
}

// A pipeline stage's preemption (close_preempted): the victim, the newest that
// holds blocks, is closed and returned as preempted (kOverloaded), its blocks
// free, for the coordinator to run again; never an older one. A newest sequence
// short of blocks in a step that runs nothing gives way itself (its elders'
// input is at other stages); one that the whole pool cannot hold still fails.
TEST_F(SchedulerTest, ClosePreemptedClosesTheNewestAndSaysSo) {
  auto forward = make_forward(4);
  Scheduler scheduler(*forward, {.close_preempted = true});
  ASSERT_NO_FATAL_FAILURE(fill_pool(scheduler, *forward));
  // Sequence 1 grows into a fourth block: sequence 2 (newer) is closed for it.
  ASSERT_TRUE(scheduler.feed_ids(1, {5, 6, 7}).ok());
  std::vector<StepOutput> outputs = scheduler.step();
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].id, 2u);
  EXPECT_TRUE(outputs[0].preempted);
  EXPECT_EQ(outputs[0].status.kind(), ErrorKind::kOverloaded);
  EXPECT_EQ(outputs[1].id, 1u);
  EXPECT_TRUE(outputs[1].status.ok()) << outputs[1].status.to_string();
  EXPECT_FALSE(scheduler.is_open(2));
  EXPECT_EQ(scheduler.preemptions(), 1u);
  EXPECT_EQ(forward->kv_pool().free_blocks(), 0);
  // A newer sequence short of blocks, alone in its step (sequence 1's input is elsewhere): it gives way.
  ASSERT_TRUE(scheduler.open(3, 64).ok());
  ASSERT_TRUE(scheduler.feed_ids(3, prompt(2, 9)).ok());
  outputs = scheduler.step();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].id, 3u);
  EXPECT_TRUE(outputs[0].preempted);
  EXPECT_FALSE(scheduler.is_open(3));
  EXPECT_TRUE(scheduler.is_open(1)) << "an older sequence is never closed for a newer one";
  // What the whole pool cannot hold fails as before, not preempted.
  scheduler.cancel(1);
  ASSERT_TRUE(scheduler.open(4, 64).ok());
  ASSERT_TRUE(scheduler.feed_ids(4, prompt(17)).ok());
  const StepOutput refused = step_until(scheduler, 4);
  EXPECT_EQ(refused.status.kind(), ErrorKind::kOverloaded) << refused.status.to_string();
  EXPECT_FALSE(refused.preempted);
  EXPECT_EQ(forward->kv_pool().free_blocks(), 4);
}

// A pipeline stage's prefix cache (named_prefixes): blocks named by the
// coordinator's digests, found again by them on a range that sees hidden states,
// not tokens. A sequence that takes the first 4 blocks of an earlier one from the
// cache and runs only its last token gets bitwise the hidden states (middle
// range) and logits (last range) of that token run whole. Names beyond what a
// sequence holds, or a reuse of more than it took, are refused by name (each
// checked to fail with its check removed).
TEST(SchedulerNamedPrefixTest, ALaterRangeReusesNamedBlocksBitwise) {
  const std::string dir = fixture_dir("llama2_mqa_f32");
  auto whole = Model::load(dir);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const int64_t layers = whole->config().num_hidden_layers;
  auto head = Model::load(dir, LayerRange{0, 1});
  auto middle = Model::load(dir, LayerRange{1, 2});
  auto tail = Model::load(dir, LayerRange{1, layers});
  ASSERT_TRUE(head.ok() && middle.ok() && tail.ok());
  auto device = make_cpu_device(2);
  Forward head_forward(*head, *device, {.kv_memory = kKvMemory});
  const std::vector<int32_t> prompt = make_prompt(17, 5, whole->config().vocab_size);
  KvCache head_cache = head_forward.make_cache(64);
  auto hidden = head_forward.run_ids(prompt, head_cache);
  ASSERT_TRUE(hidden.ok());
  const auto row = static_cast<std::ptrdiff_t>(whole->config().hidden_size);
  std::vector<PrefixCache::Digest> names(4);
  for (size_t i = 0; i < names.size(); ++i) names[i].fill(static_cast<uint8_t>(i + 1));

  for (const bool last : {false, true}) {
    Forward forward(last ? *tail : *middle, *device, {.kv_memory = kKvMemory, .kv_block_size = 4});
    Scheduler scheduler(forward, {.max_step_tokens = 5, .prefix_caching = true, .named_prefixes = true});
    ASSERT_TRUE(scheduler.open(1, 64).ok());
    ASSERT_TRUE(scheduler.name_blocks(1, std::nullopt, names).ok());
    ASSERT_TRUE(scheduler.feed_hidden(1, *hidden).ok());
    const StepOutput first = step_until(scheduler, 1);
    ASSERT_TRUE(first.status.ok()) << first.status.to_string();
    scheduler.cancel(1);

    ASSERT_TRUE(scheduler.open(2, 64).ok());
    std::vector<PrefixCache::Digest> broken = names;
    broken[1].fill(0xee);                             // not cached
    EXPECT_EQ(*scheduler.take_cached(2, broken), 1);  // the leading run only
    scheduler.cancel(2);
    ASSERT_TRUE(scheduler.open(2, 64).ok());
    ASSERT_EQ(*scheduler.take_cached(2, names), 4);
    const Status more = scheduler.name_blocks(2, 5, {});
    EXPECT_EQ(more.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(more.message().find("reuse 5 of sequence 2, which holds 4"), std::string::npos) << more.to_string();
    ASSERT_TRUE(scheduler.name_blocks(2, 4, {}).ok());
    const Status beyond = scheduler.name_blocks(2, std::nullopt, std::vector<PrefixCache::Digest>(13));
    EXPECT_EQ(beyond.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(beyond.message().find("17 named blocks for sequence 2 of 64 positions"), std::string::npos)
        << beyond.to_string();
    ASSERT_TRUE(scheduler.feed_hidden(2, std::vector<float>(hidden->end() - row, hidden->end())).ok());
    const StepOutput second = step_until(scheduler, 2);
    ASSERT_TRUE(second.status.ok()) << second.status.to_string();
    if (last) {
      EXPECT_EQ(second.values, first.values) << "the last token's logits";
    } else {
      EXPECT_EQ(second.values, std::vector<float>(first.values.end() - row, first.values.end()))
          << "the last token's hidden states";
    }
    scheduler.cancel(2);
    // Only the cache holds the 4 named blocks now: they count as free.
    EXPECT_EQ(scheduler.prefix_evictable_blocks(), 4);
    EXPECT_EQ(forward.kv_pool().free_blocks() + 4, forward.kv_pool().total_blocks());
  }
}

}  // namespace
}  // namespace tessera
