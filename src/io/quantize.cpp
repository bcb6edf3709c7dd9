// Quantizers and the type mix (quantize.h). Each quantizer is ggml-quants.c's
// reference (quantize_row_*_ref) restated: the same f32 operations in the same
// order, so that the bytes are llama.cpp's. Nothing here may be reassociated or
// fused (the build is ISO C++ without -ffast-math: GCC neither contracts nor
// reorders these sums). Block layouts: core/dtype.h and backend/cpu/quant_matmul.cpp.
#include "io/quantize.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

#include "core/check.h"

namespace tessera {

namespace {

constexpr int kQK = 256;                // elements of a K-quant super-block
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS

void put_f16(uint8_t* p, float value) {
  const uint16_t bits = f32_to_f16(value);
  p[0] = static_cast<uint8_t>(bits);
  p[1] = static_cast<uint8_t>(bits >> 8);
}
float get_f16(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8)); }

// ggml's nearest_int: round to nearest even through the f32 mantissa (|x| <= 4194303).
int nearest_int(float value) {
  const float shifted = value + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007fffff) - 0x00400000;
}

// block_q8_0: f16 d | i8 qs[32]; d = amax / 127, q = roundf(x / d) (half away from zero).
void q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / ((1 << 7) - 1);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

// block_q4_0: f16 d | u8 qs[16]; d = (the value of largest magnitude) / -8,
// q = min(15, int8(x / d + 8.5)) (truncated); element j low nibble, 16 + j high.
void q4_0(const float* x, uint8_t* b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < 16; ++j) {
    const float x0 = x[j] * id;
    const float x1 = x[16 + j] * id;
    const auto q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f))));
    const auto q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f))));
    b[2 + j] = static_cast<uint8_t>(q0 | q1 << 4);
  }
}

// ggml's make_qkx2_quants: the scale and min of n values with levels 0..nmax that
// minimize the weighted squared error, searching nstep + 1 scales around the range.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    const float w = weights[i];
    best_error += w * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        const float w = weights[i];
        cur_error += w * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j from the 12 bytes.
void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// block_q4_K (nmax 15) and block_q5_K (nmax 31): 8 sub-blocks of 32, each with a
// 6-bit scale and min relative to the f16 d and dmin.
template <int kNmax>
void q4_k_q5_k(const float* x, uint8_t* b) {
  constexpr bool kFive = kNmax == 31;
  uint8_t L[kQK], Laux[32];
  float weights[32], mins[kQK / 32], scales[kQK / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = kFive ? make_qkx2_quants(32, kNmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15)
                      : make_qkx2_quants(32, kNmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t* s = b + 4;  // scales[12]
  std::memset(s, 0, 12);
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK / 32; ++j) {
    // ggml stores nearest_int into a uint8_t first, then takes the min with 63.
    auto ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    auto lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      s[j] = ls;
      s[j + 4] = lm;
    } else {
      s[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      s[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  put_f16(b, max_scale / 63.f);
  put_f16(b + 2, max_min / 63.f);
  for (int j = 0; j < kQK / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, s, &sc, &m);
    const float d = get_f16(b) * sc;
    if (d == 0.0f) continue;
    const float dm = get_f16(b + 2) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(kNmax, l)));
    }
  }
  if constexpr (!kFive) {
    uint8_t* q = b + 16;
    for (int j = 0; j < kQK; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  } else {
    uint8_t* qh = b + 16;
    uint8_t* ql = b + 48;
    std::memset(qh, 0, kQK / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights (what q6_K_ref
// calls): levels in [-nmax, nmax), a search of 18 scales around -nmax / max.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// block_q6_K: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d; 16 groups of 16 with
// an 8-bit scale relative to d; 6-bit levels stored minus 32... as ggml lays them.
void q6_k(const float* x, uint8_t* b) {
  int8_t L[kQK];
  float scales[kQK / 16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < kQK / 16; ++ib) {
    const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
    scales[ib] = scale;
    const float abs_scale = std::fabs(scale);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scale;
    }
  }
  std::memset(b, 0, dtype_block_bytes(DType::kQ6_K));
  if (max_abs_scale < kGroupMaxEps) {
    put_f16(b + 208, 0.f);
    return;
  }
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  const float iscale = -128.f / max_scale;
  put_f16(b + 208, 1 / iscale);
  for (int ib = 0; ib < kQK / 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < kQK / 16; ++j) {
    const float d = get_f16(b + 208) * sc[j];
    if (d == 0.0f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      int l = nearest_int(x[16 * j + ii] / d);
      l = std::max(-32, std::min(31, l));
      L[16 * j + ii] = static_cast<int8_t>(l + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF;
      const uint8_t q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF;
      const uint8_t q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
  }
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int64_t layer, int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

}  // namespace

int64_t gguf_layer_of(std::string_view name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  int64_t layer = 0;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && layer < (int64_t{1} << 31); ++i)
    layer = layer * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? layer : -1;
}

void quantize_blocks(DType type, std::span<const float> x, std::span<uint8_t> out) {
  const auto block = static_cast<size_t>(dtype_block_elements(type));
  const size_t bytes = dtype_block_bytes(type);
  TS_CHECK(dtype_is_quantized(type) && x.size() % block == 0 && out.size() == x.size() / block * bytes,
           dtype_name(type), " x.size()=", x.size(), " out.size()=", out.size());
  for (size_t i = 0; i < x.size() / block; ++i) {
    const float* xb = x.data() + i * block;
    uint8_t* b = out.data() + i * bytes;
    switch (type) {
      case DType::kQ8_0: q8_0(xb, b); break;
      case DType::kQ4_0: q4_0(xb, b); break;
      case DType::kQ4_K: q4_k_q5_k<15>(xb, b); break;
      case DType::kQ5_K: q4_k_q5_k<31>(xb, b); break;
      case DType::kQ6_K: q6_k(xb, b); break;
      default: TS_CHECK(false, "quantize to ", dtype_name(type));
    }
  }
}

Result<QuantScheme> parse_quant_scheme(std::string_view name) {
  const std::string n = lower(name);
  for (const QuantScheme s :
       {QuantScheme::kQ8_0, QuantScheme::kQ4_0, QuantScheme::kQ4_K_M, QuantScheme::kQ5_K_M, QuantScheme::kQ6_K})
    if (n == quant_scheme_name(s)) return s;
  return Status::invalid_input("quantization type '" + std::string(name) +
                               "' is not one of q8_0, q4_0, q4_k_m, q5_k_m, q6_k");
}

std::string_view quant_scheme_name(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kQ8_0: return "q8_0";
    case QuantScheme::kQ4_0: return "q4_0";
    case QuantScheme::kQ4_K_M: return "q4_k_m";
    case QuantScheme::kQ5_K_M: return "q5_k_m";
    case QuantScheme::kQ6_K: return "q6_k";
  }
  return "?";
}

uint32_t quant_scheme_file_type(QuantScheme scheme) {
  switch (scheme) {  // llama.h's llama_ftype
    case QuantScheme::kQ8_0: return 7;
    case QuantScheme::kQ4_0: return 2;
    case QuantScheme::kQ4_K_M: return 15;
    case QuantScheme::kQ5_K_M: return 17;
    case QuantScheme::kQ6_K: return 18;
  }
  return 0;
}

Result<std::optional<DType>> quant_type_for(QuantScheme scheme, const QuantTensor& tensor, int64_t layers,
                                            bool tied_embeddings) {
  const std::string_view name = tensor.name;
  if (tensor.dims < 2 || !ends_with(name, "weight") || name.find("_norm.weight") != std::string_view::npos)
    return std::optional<DType>{};
  DType type = DType::kQ8_0;
  switch (scheme) {
    case QuantScheme::kQ8_0: type = DType::kQ8_0; break;
    case QuantScheme::kQ4_0: type = DType::kQ4_0; break;
    case QuantScheme::kQ4_K_M: type = DType::kQ4_K; break;
    case QuantScheme::kQ5_K_M: type = DType::kQ5_K; break;
    case QuantScheme::kQ6_K: type = DType::kQ6_K; break;
  }
  const bool k_mix = scheme == QuantScheme::kQ4_K_M || scheme == QuantScheme::kQ5_K_M;
  if (name == "output.weight" || (tied_embeddings && name == "token_embd.weight")) {
    if (tensor.row_elements % dtype_block_elements(type) != 0) {
      type = DType::kQ8_0;
    } else if (type != DType::kQ8_0) {
      type = DType::kQ6_K;
    }
  } else if (k_mix && (name.find("attn_v.weight") != std::string_view::npos ||
                       name.find("ffn_down") != std::string_view::npos)) {
    const int64_t layer = gguf_layer_of(name);
    if (layer >= 0 && use_more_bits(layer, layers)) type = DType::kQ6_K;
  }
  if (tensor.row_elements % dtype_block_elements(type) != 0) {
    if (type != DType::kQ6_K)
      return Status::unsupported("tensor '" + std::string(name) + "': rows of " + std::to_string(tensor.row_elements) +
                                 " are not a multiple of " + std::to_string(dtype_block_elements(type)) + " for " +
                                 std::string(dtype_name(type)) +
                                 " (llama.cpp falls back to Q5_0/Q5_1 there, which tessera does not compute on)");
    type = DType::kQ8_0;
  }
  if (tensor.row_elements % dtype_block_elements(type) != 0)
    return Status::unsupported("tensor '" + std::string(name) + "': rows of " + std::to_string(tensor.row_elements) +
                               " are not a multiple of 32");
  return std::optional<DType>{type};
}

}  // namespace tessera
