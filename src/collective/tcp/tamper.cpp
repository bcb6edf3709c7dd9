#include "collective/tcp/tamper.h"

#include <array>
#include <utility>

namespace tessera::collective {
namespace {

constexpr std::array<std::pair<std::string_view, TamperKind>, 11> kKinds = {{
    {"ciphertext", TamperKind::kCiphertext},
    {"tag", TamperKind::kTag},
    {"header", TamperKind::kHeader},
    {"element_count", TamperKind::kElementCount},
    {"replay", TamperKind::kReplay},
    {"reorder", TamperKind::kReorder},
    {"drop", TamperKind::kDrop},
    {"truncate", TamperKind::kTruncate},
    {"duplicate", TamperKind::kDuplicate},
    {"wrong_generation", TamperKind::kWrongGeneration},
    {"wrong_sender", TamperKind::kWrongSender},
}};

// Offsets in the piece header (seal/piece.h).
constexpr std::array<std::pair<std::string_view, size_t>, 10> kFields = {{
    {"magic", 0},
    {"layout", 3},
    {"op", 4},
    {"dtype", 5},
    {"generation", 8},
    {"sender", 16},
    {"receiver", 20},
    {"counter", 24},
    {"piece_index", 32},
    {"piece_count", 36},
}};

}  // namespace

std::optional<size_t> header_field_offset(std::string_view field) {
  for (const auto& [name, offset] : kFields) {
    if (name == field) return offset;
  }
  return std::nullopt;
}

std::string tamper_name(const Tamper& tamper) {
  std::string name;
  for (const auto& [kind_name, value] : kKinds) {
    if (value == tamper.kind) name = kind_name;
  }
  if (tamper.kind == TamperKind::kHeader) {
    for (const auto& [field, offset] : kFields) {
      if (offset == tamper.header_offset) {
        name += ':';
        name += field;
      }
    }
  }
  name += '@';
  name += std::to_string(tamper.counter);
  return name;
}

}  // namespace tessera::collective
