#include "serve/api_error.h"

namespace tessera::serve {

ApiError ApiError::from_status(const Status& status, std::string param) {
  switch (status.kind()) {
    case ErrorKind::kInvalidInput: return {400, status.message(), "invalid_request_error", std::move(param), ""};
    case ErrorKind::kUnsupported:
      return {400, status.message(), "invalid_request_error", std::move(param), "unsupported"};
    case ErrorKind::kNotFound: return {404, status.message(), "not_found_error", std::move(param), ""};
    case ErrorKind::kOverloaded: return {503, status.message(), "overloaded_error", "", "overloaded"};
    // A peer the server depends on (a pipeline stage, a TP rank) stayed silent past
    // its timeout: frozen or cut off. The gateway's timeout, 504; retry later.
    case ErrorKind::kDisconnected:
      if (status.cause() == Cause::kTimedOut) return {504, status.message(), "timeout_error", "", "timeout"};
      // It is gone: retry once it is back.
      return {503, status.message(), "service_unavailable_error", "", "unavailable"};
    default: return {500, status.to_string(), "internal_error", "", ""};
  }
}

nlohmann::json ApiError::to_json() const {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"error", {{"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}}}};
}

}  // namespace tessera::serve
