// Fault injection for the tamper tests: what a man in the middle (or a broken
// sender) does to one piece of one direction. A Tamper is set only by test
// programs (tests/collective/rank_main.cpp); the tessera CLI has no way to set one.
// Pure value types; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera::collective {

enum class TamperKind {
  kCiphertext,       // flip a payload byte after sealing
  kTag,              // flip a tag byte
  kHeader,           // flip a byte of one header field (offset names the field)
  kElementCount,     // seal with element_count + 1 (an associated-data field not on the wire)
  kReplay,           // send piece index-1 again instead of piece index
  kReorder,          // send piece index+1 before piece index
  kDrop,             // never send piece index
  kTruncate,         // send piece index without its last 5 bytes
  kDuplicate,        // send piece index twice
  kWrongGeneration,  // header generation + 1 (a piece of another generation)
  kWrongSender,      // header sender = the receiver itself (a reflected piece)
};

struct Tamper {
  uint64_t generation = 0;  // the group generation it applies in (a test runs one case per generation)
  TamperKind kind = TamperKind::kCiphertext;
  uint32_t to_rank = 1;      // the direction this rank -> to_rank
  uint64_t counter = 0;      // the message
  uint32_t piece = 1;        // the piece of that message
  size_t header_offset = 0;  // kHeader: byte offset of the field in the piece header
};

// "kind[:field]@counter", e.g. "tag@200", "header:piece_index@1", "drop@0".
std::string tamper_name(const Tamper& tamper);
// The header fields a kHeader tamper can hit: magic, layout, op, dtype,
// generation, sender, receiver, counter, piece_index, piece_count.
std::optional<size_t> header_field_offset(std::string_view field);

}  // namespace tessera::collective
