// Linked into builds without CUDA: the CUDA backend says it is absent.
#include "backend/device.h"

namespace tessera {

Result<std::unique_ptr<Device>> make_cuda_device(int /*ordinal*/) {
  return Status::unsupported("[cuda] this build of tessera has no CUDA backend");
}

}  // namespace tessera
