#include "serve/api_error.h"

namespace tessera::serve {

ApiError ApiError::from_status(const Status& status, std::string param) {
  switch (status.kind()) {
    case ErrorKind::kInvalidInput: return {400, status.message(), "invalid_request_error", std::move(param), ""};
    case ErrorKind::kUnsupported:
      return {400, status.message(), "invalid_request_error", std::move(param), "unsupported"};
    case ErrorKind::kNotFound: return {404, status.message(), "not_found_error", std::move(param), ""};
    case ErrorKind::kOverloaded: return {503, status.message(), "overloaded_error", "", "overloaded"};
    // A peer the server depends on is gone (a pipeline stage): retry once it is back.
    case ErrorKind::kDisconnected: return {503, status.message(), "service_unavailable_error", "", "unavailable"};
    default: return {500, status.to_string(), "internal_error", "", ""};
  }
}

nlohmann::json ApiError::to_json() const {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"error", {{"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}}}};
}

}  // namespace tessera::serve
