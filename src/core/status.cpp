#include "core/status.h"

namespace tessera {

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOk: return "OK";
    case ErrorKind::kInvalidInput: return "invalid input";
    case ErrorKind::kNotFound: return "not found";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kOverloaded: return "overloaded";
    case ErrorKind::kDisconnected: return "disconnected";
    case ErrorKind::kInternal: return "internal error";
  }
  return "unknown";
}

Status::Status(ErrorKind kind, std::string message, Cause cause) {
  if (kind != ErrorKind::kOk) rep_ = std::make_shared<const Rep>(Rep{kind, std::move(message), cause});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(error_kind_name(kind())) + ": " + rep_->message;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(kind(), std::string(context) + ": " + rep_->message, rep_->cause);
}

}  // namespace tessera
