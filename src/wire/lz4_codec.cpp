// liblz4 block API behind the checks stated in lz4_codec.h.
#include "wire/lz4_codec.h"

#include <lz4.h>

#include <string>

#include "core/check.h"

namespace tessera::wire {

static_assert(kLz4MaxBlockBytes == LZ4_MAX_INPUT_SIZE);
static_assert(lz4_compress_bound(1000) == LZ4_COMPRESSBOUND(1000));
static_assert(lz4_compress_bound(kLz4MaxBlockBytes) <= INT32_MAX);

std::vector<uint8_t> lz4_compress(std::span<const uint8_t> src) {
  TS_CHECK_LE(src.size(), kLz4MaxBlockBytes);
  std::vector<uint8_t> out(lz4_compress_bound(src.size()));
  const int n = LZ4_compress_default(reinterpret_cast<const char*>(src.data()), reinterpret_cast<char*>(out.data()),
                                     static_cast<int>(src.size()), static_cast<int>(out.size()));
  TS_CHECK(n > 0, "LZ4_compress_default failed on ", src.size(), " bytes");
  out.resize(static_cast<size_t>(n));
  return out;
}

Status lz4_decompress_exact(std::string_view name, std::span<const uint8_t> src, std::span<uint8_t> dst) {
  auto fail = [name](const std::string& what) { return Status::invalid_input(std::string(name) + " lz4: " + what); };
  if (dst.size() > kLz4MaxBlockBytes) {
    return fail("decoded size " + std::to_string(dst.size()) + " > max block " + std::to_string(kLz4MaxBlockBytes));
  }
  if (src.size() > lz4_compress_bound(dst.size())) {
    return fail("compressed size " + std::to_string(src.size()) + " > bound " +
                std::to_string(lz4_compress_bound(dst.size())) + " of " + std::to_string(dst.size()) + " bytes");
  }
  uint8_t empty = 0;  // liblz4 wants a real pointer even for an empty buffer
  char* out = reinterpret_cast<char*>(dst.empty() ? &empty : dst.data());
  const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(src.data()), out, static_cast<int>(src.size()),
                                    static_cast<int>(dst.size()));
  if (n < 0) {
    return fail("corrupt block, or it decodes to more than " + std::to_string(dst.size()) + " bytes");
  }
  if (static_cast<uint64_t>(n) != dst.size()) {
    return fail("decoded " + std::to_string(n) + " bytes != expected " + std::to_string(dst.size()));
  }
  return {};
}

}  // namespace tessera::wire
