// Control frames of the pipeline (wire MessageKind::kControl): one JSON object
// per frame, {"type": ..., fields...}, with the request id in the frame prefix.
// The JSON is parsed only after the frame passed the receiver's FrameLimits
// (kMaxControlBytes, whatever the tensor bound), with the depth limit of every
// JSON document tessera reads (core/text_file.h), and every field is read
// through field(), whose errors name the message type and the field.
//
// Messages (coordinator C, stages S0..Sn-1):
//   C -> S    setup    {model, begin, end, next, session, context}: load layers
//                      [begin, end) of the checkpoint at `model` (a path on the
//                      stage's host), connect to stage `next` ("" for the last);
//                      "heartbeat_ms": send heartbeats this often, from now on;
//                      "digest": the coordinator's weights digest of those layers
//                      (model/digest.h), which the stage's own must equal;
//                      with --ship-weights, "ship": a manifest (ship_manifest.h)
//   S -> C    ready    {stage, begin, end, block_size, revision}: block_size
//                      (its KV blocks' positions) says it reads prefix and
//                      blocks; revision (kStageRevision) what else it does
//   C -> S    probe    {}: answered by status {stage, free_bytes, requests,
//                      kv_bytes}, then the connection ends (layers split by
//                      free memory; `tessera probe`)
//   Si -> Si+1 upstream {session}: this connection carries hidden states
//   C -> S0 -> ... -> Sn-1  start  (request id): sample on the last stage
//                      (start_message.h); passed along ahead of the hidden states
//   C -> S0 -> ... -> Sn-1  cancel  (request id): free the request's KV
//                      cache; each stage passes it on after what it sent of
//                      the request (revision 2; the coordinator sends it to
//                      every stage itself while a prefix query is out)
//   C -> S    prefix   (request id), S -> C its answer; C -> S0 -> ... blocks:
//                      the prefix cache over the stages (prefix_message.h)
//   S -> C    preempted {stage} (request id; revision 3, when the setup has
//                      "preemption": true): its KV pool was full, and the
//                      stage closed this request, the newest it holds, to make
//                      room; the coordinator cancels it on every stage and runs
//                      it again later (start's "output", start_message.h)
//   S -> C    error    {stage, kind, cause, message} (request id; 0: not about
//                      one request): the stage's Status, typed (error_message)
//   S -> C    heartbeat {kv_blocks, kv_used} (request id 0): alive, when the
//                      setup asked for it, with its KV pool (prefix_message.h)
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "wire/frame.h"

namespace tessera::wire {

inline constexpr uint64_t kMaxControlBytes = 1 << 20;  // a start message may carry a long prompt
// A setup's "heartbeat_ms": how often the stage says it is alive.
inline constexpr int64_t kMinHeartbeatMs = 10;
inline constexpr int64_t kMaxHeartbeatMs = 60000;

// What a stage does beyond the messages above, in `ready` ("revision"; absent:
// 1). 2: it passes each `cancel` on to its next stage, after the request's
// hidden states it has sent, so that a coordinator may cancel through stage 0
// alone. 3: it reads start's "output" and, when the setup says "preemption":
// true, answers a full KV pool with `preempted` instead of an overloaded error.
// The coordinator goes by the lowest revision of its stages.
inline constexpr int64_t kStageRevision = 3;

// Where only control messages are expected (a connection's first message, a
// setup's reply): tensor frames are refused.
inline constexpr FrameLimits kControlOnly{0, 0, kMaxControlBytes};

std::vector<uint8_t> encode_control(uint64_t request_id, const nlohmann::json& message);
// The frame must be kControl; its payload must be a JSON object with a string
// "type", nested at most kMaxJsonDepth levels.
Result<nlohmann::json> decode_control(const wire::Frame& frame);

// An `error` message: the stage's name and its Status, whose kind and cause go
// by name, so the coordinator acts on them without reading the text:
//   "kind": "invalid_input" | "not_found" | "unsupported" | "overloaded" |
//           "disconnected" | "internal"
//   "cause": "none" | "interrupted" | "closed_cleanly" | "timed_out"
// The names are the wire's own (not error_kind_name(), which is for people).
nlohmann::json error_message(const std::string& stage, const Status& status);
// What an `error` message reports: its kind and cause, and "message" as text
// ("?" when absent), as a (non-OK) Status. A kind or cause that is missing, not
// a string or not one of the names above is refused (kInvalidInput), as is "ok".
struct ErrorReport {
  Status status;
};
Result<ErrorReport> error_from_message(const nlohmann::json& message);

// A string field for messages to people ("message" of an error), or `fallback`
// when it is absent or not a string; never throws on a peer's JSON.
inline std::string text_or(const nlohmann::json& message, const char* name, const std::string& fallback) {
  auto it = message.find(name);
  return it != message.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// A field of a control message, of type T (string, bool, integer), present; an
// integer must be a JSON integer within T's range.
template <typename T>
Result<T> field(const nlohmann::json& message, const char* name) {
  const std::string type = message.value("type", "?");
  auto it = message.find(name);
  if (it == message.end()) return Status::invalid_input("control message " + type + ": missing field " + name);
  bool ok = false;
  if constexpr (std::is_same_v<T, std::string>) ok = it->is_string();
  else if constexpr (std::is_same_v<T, bool>) ok = it->is_boolean();
  else if constexpr (std::is_unsigned_v<T>) ok = it->is_number_unsigned();
  else ok = it->is_number_integer();
  if (!ok) return Status::invalid_input("control message " + type + ": field " + name + " has the wrong type");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {  // never truncated to fit
    const bool fits =
        it->is_number_unsigned() ? std::in_range<T>(it->get<uint64_t>()) : std::in_range<T>(it->get<int64_t>());
    if (!fits)
      return Status::invalid_input("control message " + type + ": field " + name + " " + it->dump() +
                                   " is out of range");
  }
  return it->get<T>();
}

}  // namespace tessera::wire
