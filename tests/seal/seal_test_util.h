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

// Bytes 0, 1, 2, ... (mod 251).
inline std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i % 251);
  return out;
}

// Secret bytes first, first+1, ...
inline Secret test_secret(uint8_t first = 0) {
  Secret secret;
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(first + i);
  return secret;
}

// Expects kInvalidInput and every part in the message.
inline void expect_invalid(const Status& status, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(status.ok()) << "accepted; expected an error containing \"" << *parts.begin() << "\"";
  EXPECT_EQ(status.kind(), ErrorKind::kInvalidInput) << status.to_string();
  for (const std::string& part : parts) {
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "message \"" << status.message() << "\" lacks \"" << part << "\"";
  }
}

}  // namespace tessera::seal::testing
