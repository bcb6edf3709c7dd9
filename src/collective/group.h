// Group: the collectives that tensor-parallel ranks (and pipeline stages' point to
// point transfers) use, as a value type over a virtual implementation, in the
// manner of MLX's mlx/distributed/distributed.h. A size-1 group does nothing, so
// single-host code calls the same collectives.
//
// Buffers are raw bytes of `dtype` elements (f32, bf16 or f16). Sums run in a
// fixed order: rank 0's value first, then rank 1's, ..., accumulated in f32 and
// rounded once to the dtype, so every rank's result is bitwise identical, and a
// sealed group's results are bitwise identical to a plain group's.
//
// Errors fail closed: once any collective fails on any rank (a piece that does not
// open, a dead or silent peer), every rank's group is latched failed and every
// call returns that error until rebuild() starts a new generation.
//
// Thread safety: one thread calls the collectives of a Group at a time; rank(),
// size(), generation() and failure() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "core/status.h"

namespace tessera {

// How long a broadcast's receivers wait for the root's message to start.
enum class Wait {
  kBounded,     // as every collective: each piece within the group's progress timeout
  kWhileAlive,  // the first piece as long as the root is alive (a TCP group's heartbeats),
                // the rest bounded: a follower waiting for its leader's next step, which
                // may come after any idle time (a chat's user typing, an idle server)
};

class GroupImpl {
 public:
  virtual ~GroupImpl() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual uint64_t generation() const = 0;
  virtual Status failure() const = 0;  // OK while the group works

  virtual Status all_sum(std::span<uint8_t> data, DType dtype) = 0;
  virtual Status reduce_scatter(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) = 0;
  virtual Status all_gather(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) = 0;
  virtual Status broadcast(std::span<uint8_t> data, DType dtype, int root, Wait wait) = 0;
  virtual Status send(std::span<const uint8_t> data, DType dtype, int dst) = 0;
  virtual Status recv(std::span<uint8_t> data, DType dtype, int src) = 0;
  virtual Status rebuild() = 0;
  // Whether the collectives take device memory (an NCCL group's, on the rank's
  // GPU); otherwise every buffer is host memory.
  virtual bool sums_device_memory() const { return false; }
};

class Group {
 public:
  explicit Group(std::shared_ptr<GroupImpl> impl) : impl_(std::move(impl)) {}
  // The group of one rank: every collective returns at once (after checking its
  // arguments), leaving the data as the sum over one rank would.
  static Group local();

  int rank() const { return impl_->rank(); }
  int size() const { return impl_->size(); }
  uint64_t generation() const { return impl_->generation(); }
  Status failure() const { return impl_->failure(); }

  // Every rank passes `data` of the same length; each gets the elementwise sum.
  Status all_sum(std::span<uint8_t> data, DType dtype) { return impl_->all_sum(data, dtype); }
  // `in` holds size() equal chunks; rank r gets the sum of every rank's chunk r.
  Status reduce_scatter(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) {
    return impl_->reduce_scatter(in, out, dtype);
  }
  // `out` = every rank's `in`, in rank order.
  Status all_gather(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) {
    return impl_->all_gather(in, out, dtype);
  }
  // Every rank's `data` becomes the root's.
  Status broadcast(std::span<uint8_t> data, DType dtype, int root, Wait wait = Wait::kBounded) {
    return impl_->broadcast(data, dtype, root, wait);
  }
  Status send(std::span<const uint8_t> data, DType dtype, int dst) { return impl_->send(data, dtype, dst); }
  Status recv(std::span<uint8_t> data, DType dtype, int src) { return impl_->recv(data, dtype, src); }
  // Starts a new generation (fresh keys, counters from 0, new data connections)
  // after a failure, without restarting processes. Every rank must call it.
  Status rebuild() { return impl_->rebuild(); }
  // Whether buffers may be device memory (GroupImpl::sums_device_memory).
  bool sums_device_memory() const { return impl_->sums_device_memory(); }

 private:
  std::shared_ptr<GroupImpl> impl_;
};

// Argument checks shared by every implementation (lengths, dtype, ranks).
Status check_buffer(std::span<const uint8_t> data, DType dtype, std::string_view what);
Status check_peer(int peer, int size, int self, std::string_view what);

}  // namespace tessera
