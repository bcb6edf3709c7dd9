// The NCCL group (collective/nccl, issue 21) on what one GPU can run: a group of
// one rank over device buffers, its host buffers passed to the control group,
// rebuild(), and the refusals. Two ranks need two GPUs (the 2-GPU machine).
#include "collective/nccl/nccl_group.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/dtype.h"
#include "support/gpu.h"
#include "support/random_tensors.h"

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

}  // namespace
}  // namespace tessera
