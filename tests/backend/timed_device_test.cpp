// TimedDevice: every call reaches the other device (the same bits) and is counted once,
// as the operation the caller made.
#include "backend/timed_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

using testing::encode;
using testing::random_values;

int64_t calls_of(const TimedDevice& timed, const std::string& name) {
  for (const TimedDevice::Op& op : timed.ops())
    if (name == op.name) return op.calls;
  return 0;
}

// Fails first with a call not passed on (its output stays zeros) or not counted, or with
// matmuls counted as matmul calls (had it reached the base's default, which makes them).
TEST(TimedDeviceTest, CallsReachTheOtherDeviceAndCountOnceAsTheirOperation) {
  const int64_t tokens = 3, k = 64, n = 32;
  const auto x = random_values(static_cast<size_t>(tokens * k), 61);
  auto w_values = random_values(static_cast<size_t>(n * k), 62),
       norm_values = random_values(static_cast<size_t>(k), 63);
  const auto w_bytes = encode(w_values, DType::kBF16), norm_bytes = encode(norm_values, DType::kF32);
  const TensorView w{DType::kBF16, {n, k}, w_bytes.data()}, norm{DType::kF32, {k}, norm_bytes.data()};
  CpuDevice cpu(2);
  TimedDevice timed(cpu);
  EXPECT_EQ(timed.name(), cpu.name());
  EXPECT_TRUE(timed.ops().empty());

  std::vector<float> want(static_cast<size_t>(tokens * n)), y(want.size()), y2(want.size());
  cpu.matmul(x.data(), tokens, w, {}, want.data());
  timed.matmul(x.data(), tokens, w, {}, y.data());
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), want.size() * sizeof(float)));
  std::vector<float> normed(x.size()), normed_want(x.size());
  cpu.rms_norm(x.data(), tokens, k, norm, 1e-5f, normed_want.data());
  timed.rms_norm(x.data(), tokens, k, norm, 1e-5f, normed.data());
  timed.rms_norm(x.data(), tokens, k, norm, 1e-5f, normed.data());
  EXPECT_EQ(normed, normed_want);
  const TensorView no_bias;
  const Device::Projection outs[] = {{&w, &no_bias, y.data()}, {&w, &no_bias, y2.data()}};
  std::fill(y.begin(), y.end(), 0.0f);
  static_cast<Device&>(timed).matmuls(x.data(), tokens, outs);  // as Forward calls it: the base's default norm
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), want.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(y2.data(), want.data(), want.size() * sizeof(float)));

  EXPECT_EQ(calls_of(timed, "matmul"), 1);
  EXPECT_EQ(calls_of(timed, "rms_norm"), 2);
  EXPECT_EQ(calls_of(timed, "matmuls"), 1);
  ASSERT_EQ(timed.ops().size(), 3u);
  for (const TimedDevice::Op& op : timed.ops()) EXPECT_GE(op.seconds, 0.0) << op.name;
  timed.reset();
  EXPECT_TRUE(timed.ops().empty());
}

}  // namespace
}  // namespace tessera
