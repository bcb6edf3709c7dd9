#include "collective/group.h"

#include <string>

namespace tessera {

Status check_buffer(std::span<const uint8_t> data, DType dtype, std::string_view what) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return Status::invalid_input("[collective] " + std::string(what) + ": dtype " + std::string(dtype_name(dtype)) +
                                 " is not f32, bf16 or f16");
  }
  if (data.size() % dtype_size(dtype) != 0) {
    return Status::invalid_input("[collective] " + std::string(what) + ": " + std::to_string(data.size()) +
                                 " bytes is not a whole number of " + std::string(dtype_name(dtype)) + " elements");
  }
  return {};
}

Status check_peer(int peer, int size, int self, std::string_view what) {
  if (peer < 0 || peer >= size || peer == self) {
    return Status::invalid_input("[collective] " + std::string(what) + ": rank " + std::to_string(peer) +
                                 " is not another rank of a group of " + std::to_string(size));
  }
  return {};
}

namespace {

// One rank: sums are the identity; there is no peer to send to or receive from.
class LocalGroup final : public GroupImpl {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  uint64_t generation() const override { return 0; }
  Status failure() const override { return {}; }
  Status all_sum(std::span<uint8_t> data, DType dtype) override { return check_buffer(data, dtype, "all_sum"); }
  Status reduce_scatter(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) override {
    return copy(in, out, dtype, "reduce_scatter");
  }
  Status all_gather(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype) override {
    return copy(in, out, dtype, "all_gather");
  }
  Status broadcast(std::span<uint8_t> data, DType dtype, int root, Wait) override {
    TS_RETURN_IF_ERROR(check_buffer(data, dtype, "broadcast"));
    if (root != 0)
      return Status::invalid_input("[collective] broadcast: root " + std::to_string(root) + " in a group of 1");
    return {};
  }
  Status send(std::span<const uint8_t>, DType, int dst) override { return check_peer(dst, 1, 0, "send"); }
  Status recv(std::span<uint8_t>, DType, int src) override { return check_peer(src, 1, 0, "recv"); }
  Status rebuild() override { return {}; }

 private:
  static Status copy(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype, std::string_view what) {
    TS_RETURN_IF_ERROR(check_buffer(in, dtype, what));
    if (in.size() != out.size()) {
      return Status::invalid_input("[collective] " + std::string(what) + ": output " + std::to_string(out.size()) +
                                   " bytes != input " + std::to_string(in.size()) + " bytes in a group of 1");
    }
    if (!in.empty() && in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
    return {};
  }
};

}  // namespace

Group Group::local() { return Group(std::make_shared<LocalGroup>()); }

}  // namespace tessera
