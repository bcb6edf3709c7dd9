// Explicit little-endian encoding of fixed-width integers, in the manner of
// LevelDB's util/coding.h. Wire structs are never memcpy'd or cast: every field
// is written with put_* and read with get_* at a stated offset.
//
// get_* take the offset of the field inside a span and check that the field lies
// inside it (TS_CHECK: decoders check a header's length first, so a failed check
// here is a bug in the decoder, which the fuzzers would find). Once inlined after
// that length check, the compiler usually proves the field in bounds and drops
// the check. checked_add and checked_mul are the only arithmetic applied to sizes
// taken from the wire.
//
// decode_error builds the decoders' kInvalidInput errors, out of line and cold,
// so that a decoder's success path holds only its loads, compares and branches
// (a frame decodes in a few nanoseconds; building a message takes far longer).
// decode_in_place runs a decoder on its result in place.
// Pure functions; safe from any thread.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/status.h"

namespace tessera::wire {

template <typename T>
void put_le(std::vector<uint8_t>& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i)));
}
inline void put_u8(std::vector<uint8_t>& out, uint8_t value) { out.push_back(value); }
inline void put_u16(std::vector<uint8_t>& out, uint16_t value) { put_le(out, value); }
inline void put_u32(std::vector<uint8_t>& out, uint32_t value) { put_le(out, value); }
inline void put_u64(std::vector<uint8_t>& out, uint64_t value) { put_le(out, value); }

template <typename T>
T get_le(std::span<const uint8_t> bytes, size_t offset) {
  // size_t{offset}: the failure path gets a copy, so the caller's offset never
  // has its address taken (which kept a loop's offset in memory on every pass).
  TS_CHECK(offset <= bytes.size() && bytes.size() - offset >= sizeof(T), "offset=", size_t{offset},
           " size=", bytes.size());
  if constexpr (std::endian::native == std::endian::little) {  // one load, on the hosts tessera runs on
    T value;
    std::memcpy(&value, bytes.data() + offset, sizeof(T));
    return value;
  } else {
    uint64_t value = 0;
    for (size_t i = 0; i < sizeof(T); ++i) value |= uint64_t{bytes[offset + i]} << (8 * i);
    return static_cast<T>(value);
  }
}
inline uint8_t get_u8(std::span<const uint8_t> bytes, size_t offset) { return get_le<uint8_t>(bytes, offset); }
inline uint16_t get_u16(std::span<const uint8_t> bytes, size_t offset) { return get_le<uint16_t>(bytes, offset); }
inline uint32_t get_u32(std::span<const uint8_t> bytes, size_t offset) { return get_le<uint32_t>(bytes, offset); }
inline uint64_t get_u64(std::span<const uint8_t> bytes, size_t offset) { return get_le<uint64_t>(bytes, offset); }

// Return false on overflow, leaving *out unspecified.
[[nodiscard]] inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
[[nodiscard]] inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

namespace detail {
inline void append_part(std::string& out, std::string_view text) { out += text; }
// Every number in a wire error is unsigned; u8 fields print as numbers, not chars.
inline void append_part(std::string& out, std::unsigned_integral auto number) {
  out += std::to_string(uint64_t{number});
}
}  // namespace detail

// kInvalidInput whose message is the parts (text and unsigned numbers) in order:
//   return decode_error(name, " rank: ", rank, " > max ", kMaxRank);
// Cold and never inlined: a call costs the caller only its failing branch. The
// parts are taken by value (pass string_views, not strings): by reference, the
// caller would keep every value it might report in memory on the success path.
template <typename... Parts>
[[gnu::cold, gnu::noinline]] Status decode_error(Parts... parts) {
  std::string message;
  (detail::append_part(message, parts), ...);
  return Status::invalid_input(std::move(message));
}

// Runs `read(T*)`, which returns OK or the error, on a T built in place in the
// returned Result. A decoded header is then written once, where the caller reads
// it, instead of being zeroed in a local and copied out: for the 112-byte tensor
// header that took a large share of the decode (GCC zeroed the local with
// `rep stos`).
template <typename T, typename Read>
Result<T> decode_in_place(Read&& read) {
  Result<T> result = T{};
  Status status = read(&*result);
  if (!status.ok()) result = std::move(status);
  return result;
}

}  // namespace tessera::wire
