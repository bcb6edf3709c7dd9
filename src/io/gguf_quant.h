// Dequantization of GGUF tensor bytes to f32, for every ggml type tessera
// loads (gguf.h's GgmlType). The block layouts are ggml's (ggml-common.h); the
// arithmetic is gguf-py's NumPy dequantizer's (gguf/quants.py), operation for
// operation in f32, so the result is bitwise equal to it (tested against
// tests/fixtures/gguf/valid.json). This is the reference path for tests and
// loading; kernels that compute on blocks directly live in the backends.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <span>

#include "io/gguf.h"

namespace tessera {

// Writes out.size() values decoded from `blocks`. Preconditions (checked, they
// are the caller's arithmetic, not the file's): out.size() is a multiple of the
// type's block size and blocks.size() == out.size() / block size * type size,
// as GgufTensorInfo's nbytes is for its dims.
void dequantize_gguf(GgmlType type, std::span<const uint8_t> blocks, std::span<float> out);

}  // namespace tessera
