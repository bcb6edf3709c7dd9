// GGUF dequantization (see gguf_quant.h). Each function follows one
// dequantize_blocks of gguf-py's quants.py: the same f32 products, in the same
// order, so the output is bitwise NumPy's. A fused multiply-add could not
// change it: d (11 significant bits) x a 6-bit scale x a 5-bit q needs 22 bits,
// exact in f32, for Q4_K and Q5_K, so only their final subtraction rounds.
#include "io/gguf_quant.h"

#include <bit>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"

namespace tessera {

namespace {

constexpr int kQK = 256;  // elements of a K-quant block

float f16_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8)); }

// block_q8_0: f16 d | i8 qs[32];  x = qs * d
void q8_0(const uint8_t* b, float* out) {
  const float d = f16_at(b);
  for (int i = 0; i < 32; ++i) out[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
}

// block_q4_0: f16 d | u8 qs[16] (element i: low nibble of qs[i], element 16 + i:
// high nibble);  x = d * (q - 8)
void q4_0(const uint8_t* b, float* out) {
  const float d = f16_at(b);
  for (int i = 0; i < 16; ++i) {
    out[i] = d * static_cast<float>((b[2 + i] & 0xf) - 8);
    out[16 + i] = d * static_cast<float>((b[2 + i] >> 4) - 8);
  }
}

// The 8 six-bit scales and mins of Q4_K and Q5_K, packed in 12 bytes
// (quants.py Q4_K.get_scale_min).
void scale_min(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3f;
    m[j] = s[4 + j] & 0x3f;
    sc[4 + j] = static_cast<uint8_t>((s[8 + j] & 0x0f) | ((s[j] >> 2) & 0x30));
    m[4 + j] = static_cast<uint8_t>((s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30));
  }
}

// block_q4_K: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]. Sub-block j of 32
// (8 of them) takes the low (even j) or high (odd j) nibbles of qs[32 (j/2) ..];
// x = (d * sc[j]) * q - (dmin * m[j]).
// block_q5_K adds u8 qh[32] before qs: bit j of qh[l] is bit 4 of q.
void q4_k_q5_k(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* out) {
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  uint8_t sc[8], m[8];
  scale_min(b + 4, sc, m);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(sc[j]);
    const float ml = dmin * static_cast<float>(m[j]);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * (j / 2) + l] >> shift) & 0xf;
      if (qh != nullptr) q |= ((qh[l] >> j) & 1) << 4;
      const float scaled = dl * static_cast<float>(q);
      out[32 * j + l] = scaled - ml;
    }
  }
}

// block_q6_K: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d. Element e = 128 g +
// r (g = 0, 1): low 4 bits from nibble r / 64 of ql[64 g + r % 64], high 2 bits
// from bits 2 (r / 32) of qh[32 g + r % 32]; x = (d * scales[e / 16]) * (q - 32).
void q6_k(const uint8_t* b, float* out) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  float ds[16];
  for (int s = 0; s < 16; ++s) ds[s] = d * static_cast<float>(scales[s]);
  for (int e = 0; e < kQK; ++e) {
    const int g = e / 128, r = e % 128;
    const int lo = (ql[64 * g + r % 64] >> (4 * (r / 64))) & 0xf;
    const int hi = (qh[32 * g + r % 32] >> (2 * (r / 32))) & 3;
    out[e] = ds[e / 16] * static_cast<float>((lo | hi << 4) - 32);
  }
}

}  // namespace

void dequantize_gguf(GgmlType type, std::span<const uint8_t> blocks, std::span<float> out) {
  const uint64_t block = ggml_block_size(type);
  const uint64_t size = ggml_type_size(type);
  TS_CHECK(out.size() % block == 0, ggml_type_name(type), " out.size()=", out.size());
  const uint64_t n = out.size() / block;
  TS_CHECK(blocks.size() == n * size, ggml_type_name(type), " blocks.size()=", blocks.size(), " n=", n);
  const uint8_t* b = blocks.data();
  float* o = out.data();
  for (uint64_t i = 0; i < n; ++i, b += size, o += block) {
    switch (type) {
      case GgmlType::kF32: std::memcpy(o, b, 4); break;
      case GgmlType::kF16: *o = f16_at(b); break;
      case GgmlType::kBF16: *o = bf16_to_f32(static_cast<uint16_t>(b[0] | b[1] << 8)); break;
      case GgmlType::kQ8_0: q8_0(b, o); break;
      case GgmlType::kQ4_0: q4_0(b, o); break;
      case GgmlType::kQ4_K: q4_k_q5_k(b, nullptr, b + 16, o); break;
      case GgmlType::kQ5_K: q4_k_q5_k(b, b + 16, b + 48, o); break;
      case GgmlType::kQ6_K: q6_k(b, o); break;
    }
  }
}

}  // namespace tessera
