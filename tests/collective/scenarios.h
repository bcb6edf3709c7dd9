// What the rank processes of the group tests run (tests/collective/rank_main.cpp) and
// what the driver (tests/collective/group_process_test.cpp) expects of them, in one
// place so both sides agree: input data, the collectives, the tamper cases.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collective/group.h"
#include "collective/tcp/tamper.h"
#include "core/dtype.h"

namespace tessera::collective::test {

enum class Collective { kAllSum, kReduceScatter, kAllGather, kBroadcast, kSendRecv };
inline constexpr Collective kCollectives[] = {Collective::kAllSum, Collective::kReduceScatter, Collective::kAllGather,
                                              Collective::kBroadcast, Collective::kSendRecv};
std::string collective_name(Collective collective);

// Rank r's deterministic input of `elements` elements of dtype.
std::vector<uint8_t> input(int rank, uint64_t elements, DType dtype);

// Runs `collective` on `elements` elements per rank (reduce_scatter: per output
// chunk; all_gather: per input) and returns this rank's result bytes.
Result<std::vector<uint8_t>> run(Group& group, Collective collective, uint64_t elements, DType dtype);
// The result rank `rank` of `size` must get, computed locally from every
// rank's input in the fixed order (rank 0 first, f32 accumulation).
std::vector<uint8_t> expected(int rank, int size, Collective collective, uint64_t elements, DType dtype);

// Tamper cases: one per generation 1, 2, ... (generation 0 is the clean start).
struct TamperCase {
  Tamper tamper;  // rank 0 -> rank 1
  Collective collective;
  std::string expect;  // the check the receiving rank must name
};
std::vector<TamperCase> tamper_cases(bool quick);
// Message size of the tamper runs: every message of link 0 -> 1 is 3 pieces of
// kTamperPieceBytes (the last one partial).
inline constexpr uint32_t kTamperPieceBytes = 1024;
uint64_t tamper_elements(Collective collective, int size);

}  // namespace tessera::collective::test
