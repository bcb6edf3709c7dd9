// Buffer: bytes of device memory that the device which made them owns (host
// memory for the CPU, HBM for a GPU). A Buffer is move-only and hands its bytes
// back to the device's free function when destroyed, so activations, scratch and
// KV pages never outlive their owner unnoticed. Only the device that made it may
// read or write through data(); everyone else goes through Device::upload,
// Device::download and Device::copy.
//
// Thread safety: a value type; one owner at a time.
#pragma once

#include <cstddef>
#include <utility>

namespace tessera {

class Buffer {
 public:
  using Free = void (*)(void* data, size_t bytes);

  Buffer() = default;
  Buffer(void* data, size_t bytes, Free free) : data_(data), bytes_(bytes), free_(free) {}
  Buffer(Buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), free_(other.free_) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      free_ = other.free_;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  float* f32() const { return static_cast<float*>(data_); }

 private:
  void release() {
    if (data_ != nullptr) free_(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Free free_ = nullptr;
};

}  // namespace tessera
