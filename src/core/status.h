// Status and Result<T>: how every boundary that meets the outside world (files,
// network, parsers, user input) reports failure. Bugs use TS_CHECK instead.
//
// The error kind tells the caller what to do, as in KJ's exception kinds:
//   kInvalidInput  the input was wrong: refuse it (HTTP 4xx, refuse the frame)
//   kNotFound      a named file, tensor or field does not exist
//   kUnsupported   valid input that tessera does not implement (names the feature)
//   kOverloaded    try again later (HTTP 503)
//   kDisconnected  the peer is gone: fail the request now, reconnect
//   kInternal      a bug or an OS failure
//
// A Cause names a sub-condition that a caller acts on, set where the status is
// made, so that nobody reads it back out of the message text:
//   kInterrupted    kDisconnected: a wait was interrupted by the caller's wake fd
//                   (net/socket.h); the caller's own failure latch says why
//   kClosedCleanly  kDisconnected: the peer closed the connection in order
//                   (EOF, or TLS close_notify) before a read got its first byte
//   kTimedOut       kDisconnected: a wait passed its deadline (net/socket.h)
// with_context keeps the cause: more words, the same condition.
//
// An OK Status holds no allocation. Value types; safe to copy between threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tessera {

enum class ErrorKind { kOk, kInvalidInput, kNotFound, kUnsupported, kOverloaded, kDisconnected, kInternal };

std::string_view error_kind_name(ErrorKind kind);

enum class Cause { kNone, kInterrupted, kClosedCleanly, kTimedOut };

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(ErrorKind kind, std::string message, Cause cause = Cause::kNone);

  static Status invalid_input(std::string message) { return {ErrorKind::kInvalidInput, std::move(message)}; }
  static Status not_found(std::string message) { return {ErrorKind::kNotFound, std::move(message)}; }
  static Status unsupported(std::string message) { return {ErrorKind::kUnsupported, std::move(message)}; }
  static Status overloaded(std::string message) { return {ErrorKind::kOverloaded, std::move(message)}; }
  static Status disconnected(std::string message, Cause cause = Cause::kNone) {
    return {ErrorKind::kDisconnected, std::move(message), cause};
  }
  static Status internal(std::string message) { return {ErrorKind::kInternal, std::move(message)}; }

  bool ok() const { return rep_ == nullptr; }
  ErrorKind kind() const { return rep_ ? rep_->kind : ErrorKind::kOk; }
  Cause cause() const { return rep_ ? rep_->cause : Cause::kNone; }
  const std::string& message() const;
  // "invalid input: <message>", or "OK".
  std::string to_string() const;
  // Prefixes the message with context ("model.safetensors: " + message); OK stays OK.
  Status with_context(std::string_view context) const;

 private:
  struct Rep {
    ErrorKind kind;
    std::string message;
    Cause cause;
  };
  std::shared_ptr<const Rep> rep_;
};

// Holds a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status::internal("Result built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T value_or(T fallback) const& { return ok() ? std::get<T>(v_) : std::move(fallback); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tessera

// Returns early from a function returning Status or Result<U> when expr fails.
#define TS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::tessera::Status ts_status_ = (expr);   \
    if (!ts_status_.ok()) return ts_status_; \
  } while (0)

#define TS_CONCAT_INNER_(a, b) a##b
#define TS_CONCAT_(a, b) TS_CONCAT_INNER_(a, b)
// `TS_ASSIGN_OR_RETURN(auto x, make_x());`
#define TS_ASSIGN_OR_RETURN(lhs, expr) TS_ASSIGN_OR_RETURN_IMPL_(TS_CONCAT_(ts_result_, __LINE__), lhs, expr)
#define TS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
