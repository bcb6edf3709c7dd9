// TS_CHECK: invariants and preconditions inside the engine. A failed check is a
// bug, never bad input (bad input gets a Status), so it prints the condition and
// the values involved and aborts. Checks stay on in release builds.
//
//   TS_CHECK(k % 8 == 0, "k=", k);
//   TS_CHECK_EQ(a.size(), b.size());
#pragma once

#include <sstream>
#include <string>

namespace tessera::detail {

[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& detail);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  ((out << args), ...);
  return out.str();
}

// Out of line and cold, so a check costs its caller one compare and branch.
template <typename... Args>
[[noreturn, gnu::cold, gnu::noinline]] void fail(const char* file, int line, const char* condition,
                                                 const Args&... args) {
  check_failed(file, line, condition, concat(args...));
}

}  // namespace tessera::detail

#define TS_CHECK(cond, ...)                                                          \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::tessera::detail::fail(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

#define TS_CHECK_EQ(a, b) TS_CHECK((a) == (b), #a "=", (a), " " #b "=", (b))
#define TS_CHECK_LE(a, b) TS_CHECK((a) <= (b), #a "=", (a), " " #b "=", (b))
#define TS_CHECK_LT(a, b) TS_CHECK((a) < (b), #a "=", (a), " " #b "=", (b))
