// The NCCL group (collective/nccl, issue 21) on what one GPU can run: a group of
// one rank over device buffers, its host buffers passed to the control group,
// rebuild(), and the refusals. Two ranks need two GPUs (the 2-GPU machine): a
// tensor-parallel Forward whose sums go through NCCL.
#include "collective/nccl/nccl_group.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/fixtures.h"
#include "model/shard.h"
#include "support/gpu.h"
#include "support/random_tensors.h"
#include "tp/tp_cluster.h"

namespace tessera {
namespace {

std::span<uint8_t> bytes(Buffer& b, size_t n) { return {static_cast<uint8_t*>(b.data()), n}; }

TEST(NcclGroup, OneRankMovesDeviceBuffersAsTheSumOfOneAndGivesHostBuffersToItsControlGroup) {
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL";
  TESSERA_CUDA_OR_SKIP(gpu);
  auto group = make_nccl_group(Group::local(), {});
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_TRUE(group->failure().ok());

  const std::vector<float> values = testing::random_values(1000, 31);
  const size_t n = values.size() * sizeof(float);
  const auto device = [&] {
    auto b = gpu->alloc(n);
    EXPECT_TRUE(b.ok());
    gpu->upload(values.data(), n, b->data());
    return std::move(b).value();
  };
  const auto host = [&](const Buffer& b) {
    std::vector<float> out(values.size());
    gpu->download(b.data(), n, out.data());
    return out;
  };
  for (int round = 0; round < 2; ++round) {  // the second after rebuild()
    Buffer x = device(), y = device(), z = device();
    ASSERT_TRUE(group->all_sum(bytes(x, n), DType::kF32).ok());
    EXPECT_EQ(host(x), values) << "all_sum";
    ASSERT_TRUE(group->reduce_scatter(bytes(x, n), bytes(y, n), DType::kF32).ok());
    EXPECT_EQ(host(y), values) << "reduce_scatter";
    ASSERT_TRUE(group->all_gather(bytes(x, n), bytes(z, n), DType::kF32).ok());
    EXPECT_EQ(host(z), values) << "all_gather";
    ASSERT_TRUE(group->broadcast(bytes(x, n), DType::kF32, 0).ok());
    EXPECT_EQ(host(x), values) << "broadcast";
    std::vector<uint16_t> halves;  // 16-bit: widened, summed, rounded again
    for (const float v : values) halves.push_back(f32_to_bf16(v));
    gpu->upload(halves.data(), n / 2, y.data());
    ASSERT_TRUE(group->all_sum(bytes(y, n / 2), DType::kBF16).ok());
    std::vector<uint16_t> summed(halves.size());
    gpu->download(y.data(), n / 2, summed.data());
    EXPECT_EQ(summed, halves) << "all_sum of bf16";
    std::vector<float> on_host = values;  // host memory: the control group's (here: one rank)
    ASSERT_TRUE(group->all_sum({reinterpret_cast<uint8_t*>(on_host.data()), n}, DType::kF32).ok());
    EXPECT_EQ(on_host, values) << "all_sum of host memory";

    const Status root = group->broadcast(bytes(x, n), DType::kF32, 1);
    EXPECT_EQ(root.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(root.message().find("root 1"), std::string::npos) << root.to_string();
    EXPECT_FALSE(group->send(bytes(x, n), DType::kF32, 0).ok()) << "no other rank";
    const Status odd = group->all_sum(bytes(x, 6), DType::kF32);
    EXPECT_NE(odd.message().find("6 bytes"), std::string::npos) << odd.to_string();
    ASSERT_TRUE(group->rebuild().ok());
  }
}

TEST(NcclGroup, ARankWhoseGpuIsNotThereIsRefusedNamingTheDevice) {
  const auto group = make_nccl_group(Group::local(), {.device = 99});
  ASSERT_FALSE(group.ok());
  if (!nccl_built()) {
    EXPECT_NE(group.status().message().find("no NCCL"), std::string::npos) << group.status().to_string();
    return;
  }
  EXPECT_NE(group.status().message().find("cuda:99"), std::string::npos) << group.status().to_string();
}

// --nccl takes a rank's --device: cuda is GPU 0, cuda:N is GPU N; a rank on
// anything else is refused before any group forms, naming the device (reverted
// to accept every device, the refusals failed).
TEST(NcclGroup, ARankThatIsNotOnAGpuIsRefusedNamingItsDevice) {
  EXPECT_EQ(nccl_ordinal("cuda").value(), 0);
  EXPECT_EQ(nccl_ordinal("cuda:1").value(), 1);
  for (const std::string device : {"cpu", "cuda:", "cuda:x", "cuda:1x", "cuda:-1", "gpu:0"}) {
    const Result<int> ordinal = nccl_ordinal(device);
    ASSERT_FALSE(ordinal.ok()) << device;
    EXPECT_EQ(ordinal.status().kind(), ErrorKind::kInvalidInput) << device;
    EXPECT_NE(ordinal.status().message().find("'" + device + "'"), std::string::npos) << ordinal.status().to_string();
  }
}

// The reference's prompt, then its greedy tokens, through a TP group of two
// GPU ranks (sums through NCCL, or through their TCP group): every row's logits.
std::vector<float> run_two_gpus(const std::string& name, bool nccl) {
  const auto ref = testing::load_reference(name);
  std::vector<float> all;
  testing::TpCluster cluster(2);
  testing::TpCluster::RankSetup setup;
  setup.device = [](int rank) { return make_cuda_device(rank); };
  if (nccl) setup.group = [](Group tcp, int rank) { return make_nccl_group(std::move(tcp), {.device = rank}); };
  cluster.run(
      testing::fixture_dir(name), /*plain=*/true,
      [&](Forward& forward) {
        KvCache cache = forward.make_cache(static_cast<int64_t>(ref.prompt_ids.size() + ref.greedy_ids.size()));
        std::span<const int32_t> ids = ref.prompt_ids;
        for (size_t row = 0; row <= ref.greedy_ids.size(); ++row) {
          auto logits = forward.run_ids(ids, cache);
          ASSERT_TRUE(logits.ok()) << logits.status().to_string();
          all.insert(all.end(), logits->begin(), logits->end());
          if (row < ref.greedy_ids.size()) ids = std::span(&ref.greedy_ids[row], 1);
        }
      },
      {}, std::nullopt, setup);
  return all;
}

// Two GPU ranks of one host summing through NCCL: every fixture that splits in
// two matches transformers within its tolerance with the same greedy tokens,
// and is bitwise the same two ranks summing over their TCP group (NCCL only
// moves bytes; rank_sum adds them in the TCP group's order).
TEST(NcclGroup, TwoGpuRanksMatchTransformersAndAreBitwiseTheirTcpGroup) {
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL";
  TESSERA_CUDA_OR_SKIP(gpu);
  if (auto second = make_cuda_device(1); !second.ok())
    GTEST_SKIP() << "needs two GPUs (the 2-GPU machine): " << second.status().to_string();
  for (const std::string& name : testing::fixture_names()) {
    auto model = Model::load(testing::fixture_dir(name));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    if (!plan_shard(model->config(), model->arch(), Shard{0, 2}).ok()) continue;  // refused: tp_forward_test
    const auto ref = testing::load_reference(name);
    const std::vector<float> nccl = run_two_gpus(name, true), tcp = run_two_gpus(name, false);
    const auto vocab = static_cast<size_t>(model->config().vocab_size);
    ASSERT_EQ(nccl.size(), ref.logits.size()) << name;
    for (size_t row = 0; row * vocab < nccl.size(); ++row) {
      const std::span got(nccl.data() + row * vocab, vocab), want(ref.logits.data() + row * vocab, vocab);
      EXPECT_LE(testing::max_relative_error(got, want), ref.tolerance) << name << " row " << row;
      if (row < ref.greedy_ids.size()) {
        EXPECT_TRUE(testing::greedy_matches(got, want)) << name << " row " << row;
      }
    }
    EXPECT_TRUE(nccl == tcp) << name << ": NCCL and TCP sums differ";
  }
}

}  // namespace
}  // namespace tessera
