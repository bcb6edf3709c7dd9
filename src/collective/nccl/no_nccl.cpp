// A build without NCCL (CMake found no nccl.h or libnccl, or no CUDA): the NCCL
// group is refused, saying so; TCP groups work as always.
#include "collective/nccl/nccl_group.h"

namespace tessera {

bool nccl_built() { return false; }

Result<Group> make_nccl_group(Group, const NcclOptions&) {
  return Status::unsupported("[nccl] this build has no NCCL (CMake found no nccl.h and libnccl with CUDA)");
}

}  // namespace tessera
