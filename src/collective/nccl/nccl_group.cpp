#include "collective/nccl/nccl_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "collective/nccl/rank_sum.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dtype) {
  return dtype == DType::kF32 ? ncclFloat32 : dtype == DType::kBF16 ? ncclBfloat16 : ncclFloat16;
}

// Whether `p` is device memory (of any GPU) rather than the host's.
bool on_device(const void* p) {
  cudaPointerAttributes attributes{};
  const bool device = cudaPointerGetAttributes(&attributes, p) == cudaSuccess &&
                      (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged);
  (void)cudaGetLastError();  // a host pointer may leave an error behind
  return device;
}

class NcclGroup final : public GroupImpl {
 public:
  NcclGroup(Group control, NcclOptions options) : control_(std::move(control)), options_(options) {}
  ~NcclGroup() override {
    if (comm_ != nullptr) ncclCommAbort(comm_);  // never waits for the other ranks
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Makes the stream and the communicator (every rank at once).
  Status form() {
    const std::string where = "[nccl] rank " + std::to_string(rank()) + " on cuda:" + std::to_string(options_.device);
    if (const cudaError_t e = cudaSetDevice(options_.device); e != cudaSuccess)
      return Status::unsupported(where + ": " + cudaGetErrorString(e));
    if (stream_ == nullptr) {
      if (const cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess)
        return Status::internal(where + ": a stream: " + cudaGetErrorString(e));
    }
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // no NVLink multicast (the GPU machine's rule)
    ncclUniqueId id{};
    if (rank() == 0) {
      if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
        return Status::internal(where + ": its unique id: " + ncclGetErrorString(r));
    }
    static_assert(sizeof(id) % sizeof(float) == 0);
    TS_RETURN_IF_ERROR(control_.broadcast({reinterpret_cast<uint8_t*>(&id), sizeof(id)}, DType::kF32, 0)
                           .with_context(where + ": the unique id from rank 0"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; complete() waits, bounded
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      comm_ = nullptr;
      return Status::disconnected(where + ": forming the communicator: " + ncclGetErrorString(r));
    }
    {
      std::lock_guard lock(mutex_);
      failure_ = Status();
      generation_ = control_.generation();
    }
    return wait_ready("forming the communicator", Clock::now() + options_.timeout);
  }

  bool sums_device_memory() const override { return true; }
  int rank() const override { return control_.rank(); }
  int size() const override { return control_.size(); }
  uint64_t generation() const override {
    std::lock_guard lock(mutex_);
    return generation_;
  }
  Status failure() const override {
    std::lock_guard lock(mutex_);
    return failure_.ok() ? control_.failure() : failure_;
  }

  Status all_sum(std::span<uint8_t> data, DType dtype) override {
    TS_RETURN_IF_ERROR(check_buffer(data, dtype, "all_sum"));
    if (data.empty() || !on_device(data.data())) return control_.all_sum(data, dtype);
    const auto n = static_cast<int64_t>(data.size() / dtype_size(dtype));
    TS_ASSIGN_OR_RETURN(void* gathered, scratch(data.size() * static_cast<size_t>(size())));
    return run(
        "all_sum",
        [&] { return ncclAllGather(data.data(), gathered, static_cast<size_t>(n), nccl_type(dtype), comm_, stream_); },
        [&] { collective::rank_sum(stream_, gathered, size(), n, 0, n, dtype, data.data()); });
  }

  Status reduce_scatter(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) override {
    TS_RETURN_IF_ERROR(check_buffer(in, dtype, "reduce_scatter"));
    TS_RETURN_IF_ERROR(check_buffer(out, dtype, "reduce_scatter"));
    if (in.size() != out.size() * static_cast<size_t>(size()))
      return Status::invalid_input("[nccl] reduce_scatter: input " + std::to_string(in.size()) + " bytes != " +
                                   std::to_string(size()) + " x output " + std::to_string(out.size()) + " bytes");
    if (in.empty() || !on_device(in.data())) return control_.reduce_scatter(in, out, dtype);
    const auto all = static_cast<int64_t>(in.size() / dtype_size(dtype));
    const auto mine = static_cast<int64_t>(out.size() / dtype_size(dtype));
    TS_ASSIGN_OR_RETURN(void* gathered, scratch(in.size() * static_cast<size_t>(size())));
    return run(
        "reduce_scatter",
        [&] { return ncclAllGather(in.data(), gathered, static_cast<size_t>(all), nccl_type(dtype), comm_, stream_); },
        [&] { collective::rank_sum(stream_, gathered, size(), all, rank() * mine, mine, dtype, out.data()); });
  }

  Status all_gather(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) override {
    TS_RETURN_IF_ERROR(check_buffer(in, dtype, "all_gather"));
    if (out.size() != in.size() * static_cast<size_t>(size()))
      return Status::invalid_input("[nccl] all_gather: output " + std::to_string(out.size()) + " bytes != " +
                                   std::to_string(size()) + " x input " + std::to_string(in.size()) + " bytes");
    if (in.empty() || !on_device(in.data())) return control_.all_gather(in, out, dtype);
    return run("all_gather", [&] {
      return ncclAllGather(in.data(), out.data(), in.size() / dtype_size(dtype), nccl_type(dtype), comm_, stream_);
    });
  }

  Status broadcast(std::span<uint8_t> data, DType dtype, int root, Wait wait) override {
    TS_RETURN_IF_ERROR(check_buffer(data, dtype, "broadcast"));
    if (root < 0 || root >= size())
      return Status::invalid_input("[nccl] broadcast: root " + std::to_string(root) + " in a group of " +
                                   std::to_string(size()));
    // Device buffers wait bounded whatever `wait` says: a leader's idle waits are on host messages.
    if (data.empty() || !on_device(data.data())) return control_.broadcast(data, dtype, root, wait);
    return run("broadcast", [&] {
      return ncclBroadcast(data.data(), data.data(), data.size() / dtype_size(dtype), nccl_type(dtype), root, comm_,
                           stream_);
    });
  }

  Status send(std::span<const uint8_t> data, DType dtype, int dst) override {
    TS_RETURN_IF_ERROR(check_buffer(data, dtype, "send"));
    TS_RETURN_IF_ERROR(check_peer(dst, size(), rank(), "send"));
    if (data.empty() || !on_device(data.data())) return control_.send(data, dtype, dst);
    return run("send", [&] {
      return ncclSend(data.data(), data.size() / dtype_size(dtype), nccl_type(dtype), dst, comm_, stream_);
    });
  }

  Status recv(std::span<uint8_t> data, DType dtype, int src) override {
    TS_RETURN_IF_ERROR(check_buffer(data, dtype, "recv"));
    TS_RETURN_IF_ERROR(check_peer(src, size(), rank(), "recv"));
    if (data.empty() || !on_device(data.data())) return control_.recv(data, dtype, src);
    return run("recv", [&] {
      return ncclRecv(data.data(), data.size() / dtype_size(dtype), nccl_type(dtype), src, comm_, stream_);
    });
  }

  // A new generation: control's, then a communicator under a new id.
  Status rebuild() override {
    TS_RETURN_IF_ERROR(control_.rebuild());
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    return form();
  }

 private:
  // Enqueues one NCCL call once the device's earlier work is done, then `after`
  // on the same stream once NCCL has taken the call (a non-blocking
  // communicator may still be enqueuing when the call returns), then waits for
  // the stream, every wait bounded.
  template <typename Enqueue, typename After = void (*)()>
  Status run(
      const char* what, Enqueue enqueue, After after = [] {}) {
    TS_RETURN_IF_ERROR(failure());
    if (const cudaError_t e = cudaSetDevice(options_.device); e != cudaSuccess)
      return fail(what, cudaGetErrorString(e));
    // The inputs come from kernels on the device's own stream.
    if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail(what, cudaGetErrorString(e));
    const ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress) return fail(what, ncclGetErrorString(r));
    const Clock::time_point deadline = Clock::now() + options_.timeout;
    TS_RETURN_IF_ERROR(wait_ready(what, deadline));
    after();
    for (;;) {  // the stream's work done, or an error, or the deadline
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return {};
      if (q != cudaErrorNotReady) return fail(what, cudaGetErrorString(q));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) return fail(what, ncclGetErrorString(state));
      if (Clock::now() > deadline) return timed_out(what);
      std::this_thread::yield();
    }
  }

  // Waits until the communicator has taken the last call (non-blocking mode).
  Status wait_ready(const char* what, Clock::time_point deadline) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return fail(what, ncclGetErrorString(r));
      if (state == ncclSuccess) return {};
      if (state != ncclInProgress) return fail(what, ncclGetErrorString(state));
      if (Clock::now() > deadline) return timed_out(what);
      std::this_thread::yield();
    }
  }

  Status timed_out(const char* what) {
    return fail(what, "no answer within " + std::to_string(options_.timeout.count()) +
                          " ms: a rank is dead or frozen, or not in this call");
  }

  // Aborts the communicator and latches the group failed until rebuild().
  Status fail(const char* what, const std::string& why) {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    std::lock_guard lock(mutex_);
    failure_ = Status::disconnected("[nccl] " + std::string(what) + " on rank " + std::to_string(rank()) +
                                    " (cuda:" + std::to_string(options_.device) + "): " + why +
                                    "; the group is failed until rebuild()");
    return failure_;
  }

  // Device memory of at least `bytes` (the gathered inputs of a sum).
  Result<void*> scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (scratch_ != nullptr) cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      if (const cudaError_t e = cudaMalloc(&scratch_, bytes); e != cudaSuccess) {
        (void)cudaGetLastError();
        return Status::overloaded("[nccl] " + std::to_string(bytes) + " bytes of scratch on cuda:" +
                                  std::to_string(options_.device) + ": " + cudaGetErrorString(e));
      }
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  Group control_;
  const NcclOptions options_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  mutable std::mutex mutex_;  // failure_ and generation_, read from any thread
  Status failure_;
  uint64_t generation_ = 0;
};

}  // namespace

bool nccl_built() { return true; }

Result<Group> make_nccl_group(Group control, const NcclOptions& options) {
  auto group = std::make_shared<NcclGroup>(std::move(control), options);
  TS_RETURN_IF_ERROR(group->form());
  return Group(std::move(group));
}

}  // namespace tessera
