// What a sanitized build (`make sanitize`, `make tsan`) changes for tests that
// measure a process: its runtime adds memory to every process (ASan's shadow
// memory and quarantine, TSan's shadow), which bounds on a process's memory add,
// and it computes 10-50 times slower, which waits for computation allow for.
#pragma once

#include <cstdint>

namespace tessera::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

inline constexpr uint64_t kSanitizerMemory = kSanitized ? uint64_t{512} << 20 : 0;

}  // namespace tessera::testing
