// weights_digest: a fingerprint of what a Model binds, so that a pipeline's
// coordinator and each stage can check they hold the same checkpoint before any
// request runs (a stage on another checkpoint of the same shape would otherwise
// answer garbage with exit code 0).
//
// SHA-256 (OpenSSL) over the config's fields and, for every bound tensor in
// checkpoint order, its name, dtype, shape and its first and last 64 KiB (all
// of it when smaller). Sampling keeps it to milliseconds for any model size: it
// tells apart checkpoints that differ by accident (another seed, another
// fine-tune), not ones forged to collide, which an authenticated stage could
// fake anyway by echoing the coordinator's digest.
//
// Pure; safe from any thread.
#pragma once

#include <string>

#include "model/model.h"

namespace tessera {

// 64 lowercase hex digits.
std::string weights_digest(const Model& model);

}  // namespace tessera
