// ApiError: an error as the OpenAI API reports it, with the HTTP status it goes
// out with:
//
//   HTTP 400 {"error": {"message": "...", "type": "invalid_request_error",
//                       "param": "temperature", "code": null}}
//
// `param` names the request field at fault (null when none does). Errors from
// the engine (core/status.h) map by kind: kInvalidInput 400, kNotFound 404,
// kUnsupported 400, kOverloaded 503 (with Retry-After), kInternal 500. A peer
// the server depends on (a pipeline stage, a TP rank) fails by its cause: gone
// (kDisconnected) 503, silent past its timeout (kDisconnected, Cause::kTimedOut)
// 504, both with Retry-After; a frame it sent that the server refused is
// kInternal, 500 (a broken deployment: retrying does not help).
//
// Value type; safe to copy between threads.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace tessera::serve {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null

  static ApiError invalid(std::string message, std::string param = "") {
    return {400, std::move(message), "invalid_request_error", std::move(param), ""};
  }
  // An engine or tokenizer failure, by its kind.
  static ApiError from_status(const Status& status, std::string param = "");

  nlohmann::json to_json() const;
  // Seconds a client should wait before retrying (the Retry-After header), 0 for none.
  int retry_after_seconds() const { return http_status == 429 || http_status == 503 || http_status == 504 ? 1 : 0; }
};

}  // namespace tessera::serve
