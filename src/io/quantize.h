// Quantization of f32 weights into ggml's blocks, as llama.cpp's `llama-quantize`
// writes them without an importance matrix, and the per-tensor type mix it chooses
// for each scheme (q8_0, q4_0, q4_k_m, q5_k_m, q6_k).
//
// The quantizers follow ggml's reference quantizers (ggml-quants.c
// quantize_row_{q8_0,q4_0,q4_K,q5_K,q6_K}_ref, which llama-quantize runs when no
// importance matrix is given) operation for operation in f32, so their blocks are
// byte for byte llama.cpp's (tested against llama-quantize's files). The mix follows
// llama.cpp's llama_tensor_get_type (src/llama-quant.cpp) for dense models of the
// architectures tessera runs; see quant_type_for.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"

namespace tessera {

// Writes the blocks of x (x.size() a multiple of the type's block) into out
// (dtype_bytes(type, x.size()) bytes). type: one of the quantized DTypes.
void quantize_blocks(DType type, std::span<const float> x, std::span<uint8_t> out);

// What `tessera quantize --type` names: llama-quantize's file types of the same name.
enum class QuantScheme { kQ8_0, kQ4_0, kQ4_K_M, kQ5_K_M, kQ6_K };
// "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k" (case-insensitive), else kInvalidInput
// naming the choices.
Result<QuantScheme> parse_quant_scheme(std::string_view name);
std::string_view quant_scheme_name(QuantScheme scheme);
// llama.cpp's llama_ftype value for general.file_type (2, 7, 15, 17, 18).
uint32_t quant_scheme_file_type(QuantScheme scheme);

// The facts about one GGUF tensor that the mix depends on.
struct QuantTensor {
  std::string_view name;     // GGUF name: "blk.3.attn_v.weight", "output.weight", ...
  int64_t dims = 0;          // number of dimensions
  int64_t row_elements = 0;  // dims[0], the row length
};

// The type llama-quantize gives `tensor` under `scheme` in a dense model of
// `layers` layers whose token embedding is (tied) or is not also the output:
//   - not quantized (nullopt: kept as it is): tensors of fewer than 2 dimensions,
//     names not ending in "weight", norms ("_norm.weight");
//   - output.weight (and token_embd.weight when tied): q8_0 stays q8_0, else q6_k
//     (q8_0 when rows are not a multiple of the type's block);
//   - q4_k_m / q5_k_m: attn_v and ffn_down of the layers where use_more_bits holds
//     (the first and last eighth, and every third between) are q6_k;
//   - anything else the scheme's base type (q8_0, q4_0, q4_k, q5_k, q6_k).
// A row that is not a whole number of the chosen type's blocks falls back as
// llama.cpp's tensor_type_fallback does: q6_k to q8_0; q4_k and q5_k would become
// Q5_0 / Q5_1, which tessera does not compute on, so that is kUnsupported naming
// the tensor. The layer of attn_v and ffn_down is read from the name (llama.cpp
// counts them in file order, which is layer order in the files it writes).
// N of a name "blk.N.<...>" (sscanf's "blk.%d." as llama.cpp reads it), else -1.
int64_t gguf_layer_of(std::string_view name);

Result<std::optional<DType>> quant_type_for(QuantScheme scheme, const QuantTensor& tensor, int64_t layers,
                                            bool tied_embeddings);

}  // namespace tessera
