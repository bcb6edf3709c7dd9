#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace tessera::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& detail) {
  std::fprintf(stderr, "[check] %s:%d: %s failed%s%s\n", file, line, condition, detail.empty() ? "" : ": ",
               detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tessera::detail
