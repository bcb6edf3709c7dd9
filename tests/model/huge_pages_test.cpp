// The weights' memory is advised for transparent huge pages (core/mapped_file.h's
// advise_huge_pages): a checkpoint's mapped files and random weights alike, so that
// decode streams both through 2 MiB pages where the kernel gives them. Read back from
// /proc/self/smaps: the mapping that holds a weight carries VmFlags "hg" (VM_HUGEPAGE)
// unless TESSERA_HUGEPAGES is "0", and then it does not (ctest runs it with the switch
// unset; docs/benchmarks.md's A/B runs set it).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "fixtures.h"
#include "model/model.h"

namespace tessera {
namespace {

using testing::fixture_dir;

bool switched_on() {
  const char* text = std::getenv("TESSERA_HUGEPAGES");
  return text == nullptr || std::strcmp(text, "0") != 0;
}

// The VmFlags of the mapping that holds `p`, from /proc/self/smaps ("" when none does).
std::string vm_flags(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream fields(line);
    if (fields >> std::hex >> start >> dash >> end && dash == '-') {  // a mapping's first line
      inside = start <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(8) + " ";
    }
  }
  return "";
}

bool advised(const void* p) { return vm_flags(p).find(" hg ") != std::string::npos; }

TEST(HugePagesTest, CheckpointMapsAreAdvised) {
  auto model = Model::load(fixture_dir("qwen3_moe_bf16"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const TensorView& w = model->weights().layers.front().wq;
  ASSERT_NE(vm_flags(w.data), "") << "no mapping holds the weight";
  EXPECT_EQ(advised(w.data), switched_on()) << vm_flags(w.data);
}

// Random weights lie one after another in advised mappings (a region of 64 MiB holds
// many), 64-byte aligned, and are the same values whatever holds them: two models of one
// seed are bitwise equal.
TEST(HugePagesTest, RandomWeightsAreAdvisedAndTheSameForOneSeed) {
  auto config = load_model_config_file(fixture_dir("qwen3_moe_bf16") + "/config.json", check_model_type);
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto a = Model::random(*config, DType::kBF16, 7);
  auto b = Model::random(*config, DType::kBF16, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  const ModelWeights& wa = a->weights();
  const ModelWeights& wb = b->weights();
  for (const TensorView* t : {&wa.embed, &wa.layers.front().wq, &wa.layers.back().wo, &wa.final_norm}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 64, 0u);
    EXPECT_EQ(advised(t->data), switched_on()) << vm_flags(t->data);
  }
  for (const auto& [x, y] : {std::pair{&wa.embed, &wb.embed}, std::pair{&wa.layers.back().wo, &wb.layers.back().wo}}) {
    ASSERT_EQ(x->nbytes(), y->nbytes());
    EXPECT_EQ(std::memcmp(x->data, y->data, x->nbytes()), 0);
  }
}

}  // namespace
}  // namespace tessera
