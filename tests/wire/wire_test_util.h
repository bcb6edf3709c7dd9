// Helpers shared by the wire tests: hand-built (hostile) headers and error
// expectations. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::wire::testing {

template <typename T>
std::span<const uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// Bytes 0, 1, 2, ... (mod 251).
inline std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i % 251);
  return out;
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

template <typename T>
void expect_invalid(const Result<T>& result, std::initializer_list<std::string> parts) {
  expect_invalid(result.status(), parts);
}

}  // namespace tessera::wire::testing
