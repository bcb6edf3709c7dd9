// with_quant_type: the GGUF block type of a weight (core/dtype.h) as a template
// argument, for the kernels on blocks that the CPU (cpu/quant_matmul.cpp) and CUDA
// (cuda/quant_matmul.cu) compile once per type.
#pragma once

#include "core/check.h"
#include "core/dtype.h"

namespace tessera {

// Calls fn.template operator()<T>() with T the block type `dtype` (kQ8_0, kQ4_0,
// kQ4_K, kQ5_K or kQ6_K); any other dtype is a failed check naming it.
template <typename Fn>
inline void with_quant_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kQ8_0: return fn.template operator()<DType::kQ8_0>();
    case DType::kQ4_0: return fn.template operator()<DType::kQ4_0>();
    case DType::kQ4_K: return fn.template operator()<DType::kQ4_K>();
    case DType::kQ5_K: return fn.template operator()<DType::kQ5_K>();
    case DType::kQ6_K: return fn.template operator()<DType::kQ6_K>();
    default: TS_CHECK(false, "kernels on GGUF blocks take q8_0, q4_0, q4_k, q5_k or q6_k, not ", dtype_name(dtype));
  }
}

}  // namespace tessera
