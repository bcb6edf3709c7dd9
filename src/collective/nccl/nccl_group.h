// Group over the GPUs of one host through NCCL (issue 21). Its ranks agree on
// NCCL's unique id over `control`, a group of the same ranks over authenticated
// TCP (sealed by default), never over an unauthenticated socket: rank 0 makes
// the id and broadcasts it. Collectives on device memory go through NCCL on the
// rank's GPU; collectives on host memory (a tensor-parallel leader's step
// messages) go through `control` as they always did. Within one host NCCL's
// traffic is plain: GPUs of one host trust each other (docs/distributed.md).
//
// NCCL only moves bytes (all-gather, broadcast, send and receive); every sum is
// rank_sum's, in group.h's order (rank 0's value first, then rank 1's, ..., in
// f32, rounded once), so an NCCL group's sums are bitwise a TCP group's, on
// every rank, whatever the length of the buffer.
//
// Fail closed: every NCCL call is non-blocking and waited for at most
// `timeout`; an error or a timeout aborts the communicator and latches the group
// failed (as a TCP group does) until rebuild(), which rebuilds `control` and
// forms a new communicator under a new id. NVLink multicast stays off
// (NCCL_NVLS_ENABLE=0: the GPU machine's notes say why).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "backend/device.h"
#include "collective/group.h"
#include "core/status.h"

namespace tessera {

struct NcclOptions {
  int device = 0;                            // this rank's CUDA device
  std::chrono::milliseconds timeout{10000};  // each collective, and forming the communicator
};

// The CUDA ordinal of a rank's --device for its NCCL group ("cuda" is 0,
// "cuda:N" is N); any other device is refused, naming it.
inline Result<int> nccl_ordinal(std::string_view device) {
  if (const std::optional<int> ordinal = cuda_ordinal(device)) return *ordinal;
  return Status::invalid_input("an NCCL group (--nccl) needs its rank on a GPU (--device cuda[:N]), not '" +
                               std::string(device) + "'");
}

// Whether this build has NCCL (a build without it has no_nccl.cpp: false).
bool nccl_built();
// Forms the NCCL group of control's ranks (every rank calls it at once).
Result<Group> make_nccl_group(Group control, const NcclOptions& options);

}  // namespace tessera
