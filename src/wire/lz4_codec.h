// LZ4 block compression of payloads, through liblz4 (never a hand-written LZ4).
//
// lz4_decompress_exact decompresses into a buffer the receiver sized from the
// shape it expects, never from a size the peer sent, and refuses a block that
// decompresses to any other size: LZ4_decompress_safe stops at the buffer's end,
// and a shorter result is a size lie. Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::wire {

// liblz4's LZ4_MAX_INPUT_SIZE: the largest block, compressed or not.
inline constexpr uint64_t kLz4MaxBlockBytes = 0x7E000000;

// LZ4_compressBound in u64: the largest compressed size of n <= kLz4MaxBlockBytes bytes.
inline constexpr uint64_t lz4_compress_bound(uint64_t n) { return n + n / 255 + 16; }

// Precondition (TS_CHECK): src.size() <= kLz4MaxBlockBytes.
std::vector<uint8_t> lz4_compress(std::span<const uint8_t> src);

// Checks, in order: dst.size() <= kLz4MaxBlockBytes, src.size() <=
// lz4_compress_bound(dst.size()), the block decodes inside dst, and it fills dst
// exactly.
Status lz4_decompress_exact(std::string_view name, std::span<const uint8_t> src, std::span<uint8_t> dst);

}  // namespace tessera::wire
