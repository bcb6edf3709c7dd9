// The GPU for tests labelled gpu: TESSERA_CUDA_OR_SKIP(name) declares
// std::unique_ptr<Device> name on cuda:0, or skips the test, saying why, on a
// machine without a GPU or a build without CUDA.
#pragma once

#include <gtest/gtest.h>

#include "backend/device.h"

#define TESSERA_CUDA_OR_SKIP(name)                                                            \
  auto name##_made = ::tessera::make_cuda_device(0);                                          \
  if (!name##_made.ok()) GTEST_SKIP() << "needs a GPU: " << name##_made.status().to_string(); \
  std::unique_ptr<::tessera::Device> name = std::move(name##_made).value()
