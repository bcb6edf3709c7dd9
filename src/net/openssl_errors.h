// OpenSSL's (thread-local) error queue as one line, for error messages of the
// net layer. Drains the queue; "" when it was empty.
#pragma once

#include <openssl/err.h>

#include <string>

namespace tessera::net {

inline std::string openssl_errors() {
  std::string out;
  while (unsigned long code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

}  // namespace tessera::net
