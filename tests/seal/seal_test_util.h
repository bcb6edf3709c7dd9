// Helpers shared by the seal tests: hex vectors, byte patterns and error
// expectations. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "seal/key_schedule.h"
#include "wire/wire_test_util.h"

namespace tessera::seal::testing {

inline std::vector<uint8_t> from_hex(std::string_view hex) {
  const auto nibble = [](char c) -> uint8_t {
    if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
    return static_cast<uint8_t>(c - 'a' + 10);
  };
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<uint8_t>(nibble(hex[i]) << 4 | nibble(hex[i + 1])));
  return out;
}

// Secret bytes first, first+1, ...
inline Secret test_secret(uint8_t first = 0) {
  Secret secret;
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(first + i);
  return secret;
}

// Shared with the wire tests: pattern(n), expect_invalid(status, parts).
using wire::testing::expect_invalid;
using wire::testing::pattern;

}  // namespace tessera::seal::testing
