#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"

namespace tessera {

namespace {

Status reserve_floats(Device& device, Buffer& buffer, int64_t count) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (buffer.bytes() >= bytes) return {};
  buffer = Buffer();
  TS_ASSIGN_OR_RETURN(buffer, device.alloc(bytes));
  return {};
}

// The first k of `n` indices by descending score, the lower index first among
// equal scores (a strict order, so the choice is the same on every run, and the
// GPU's: routing::ranks_before).
std::vector<int32_t> top_indices(const std::vector<float>& score, size_t k) {
  std::vector<int32_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) {
                      return routing::ranks_before(score[static_cast<size_t>(a)], a, score[static_cast<size_t>(b)], b);
                    });
  order.resize(k);
  return order;
}

Route softmax_top_k(const MoeSpec& moe, const float* logits) {
  const auto n = static_cast<size_t>(moe.experts);
  // Softmax in f32, as transformers computes it (dtype=torch.float).
  // (expert_routing.h's exponential: the GPU's routing gets the same bits.)
  const float max = *std::max_element(logits, logits + n);
  std::vector<float> probs(n);
  float sum = 0;
  for (size_t e = 0; e < n; ++e) {
    probs[e] = routing::softmax_term(logits[e], max);
    sum += probs[e];
  }
  for (float& p : probs) p /= sum;
  Route route;
  route.experts = top_indices(probs, static_cast<size_t>(moe.top_k));
  for (const int32_t e : route.experts) route.weights.push_back(probs[static_cast<size_t>(e)]);
  if (moe.norm_topk_prob) {
    float top = 0;  // summed in descending order, as torch sums topk's values
    for (const float w : route.weights) top += w;
    for (float& w : route.weights) w /= top;
  }
  return route;
}

// transformers' Glm4MoeMoE.route_tokens_to_experts (DeepSeek-V3's noaux_tc), in f32.
Route sigmoid_group_top_k(const MoeSpec& moe, const float* logits, const float* bias) {
  const auto n = static_cast<size_t>(moe.experts), per_group = n / static_cast<size_t>(moe.groups);
  TS_CHECK(per_group >= 2 && per_group * static_cast<size_t>(moe.groups) == n && moe.top_groups <= moe.groups,
           "experts ", n, " in groups ", moe.groups, ", keeping ", moe.top_groups);  // arch/glm4_moe.cpp refuses these
  std::vector<float> scores(n), choice(n);
  for (size_t e = 0; e < n; ++e) {
    scores[e] = routing::sigmoid(logits[e]);
    choice[e] = scores[e] + (bias ? bias[e] : 0.0f);
  }
  // Each group's score: its two best choices, summed best first (topk(2).sum()).
  std::vector<float> group_scores(static_cast<size_t>(moe.groups));
  for (size_t g = 0; g < group_scores.size(); ++g) {
    const std::vector<float> group(choice.begin() + static_cast<std::ptrdiff_t>(g * per_group),
                                   choice.begin() + static_cast<std::ptrdiff_t>((g + 1) * per_group));
    const std::vector<int32_t> best = top_indices(group, 2);
    group_scores[g] = group[static_cast<size_t>(best[0])] + group[static_cast<size_t>(best[1])];
  }
  std::vector<bool> kept(group_scores.size(), false);
  for (const int32_t g : top_indices(group_scores, static_cast<size_t>(moe.top_groups)))
    kept[static_cast<size_t>(g)] = true;
  // The other groups' experts score 0.0 (masked_fill), not -inf: they can still
  // win over a kept expert whose corrected score is below 0.
  for (size_t e = 0; e < n; ++e)
    if (!kept[e / per_group]) choice[e] = 0.0f;
  Route route;
  route.experts = top_indices(choice, static_cast<size_t>(moe.top_k));
  for (const int32_t e : route.experts) route.weights.push_back(scores[static_cast<size_t>(e)]);
  if (moe.norm_topk_prob) {
    float sum = 0;
    for (const float w : route.weights) sum += w;
    sum += 1e-20f;
    for (float& w : route.weights) w /= sum;
  }
  return route;
}

// A lone token (a decode step of one sequence) on a device that routes on the
// host: the gate and up of its top_k experts in one Device::matmuls call (the same
// x for all: a device may run them as one job), one SiLU·mul over all, their downs
// in one Device::matmuls_each call, then each expert's weighted add in ascending
// expert order. Bitwise the grouped path's numbers (the same matmul rows, the same
// order of adds), with no gather and fewer calls. gate and up [top_k, inter], down
// [top_k, hidden], scale [top_k] are device scratch; out [1, hidden].
struct LoneScratch {
  float* gate = nullptr;
  float* up = nullptr;
  float* down = nullptr;
  float* scale = nullptr;
  std::vector<float>* zeros = nullptr;
};

void run_lone(Device& device, const LayerWeights& w, const MoeSpec& moe, const float* x, int64_t hidden,
              const Route& route, const LoneScratch& s, float* out) {
  // Its experts in ascending order, the order their outputs are added in.
  std::vector<size_t> order(route.experts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return route.experts[a] < route.experts[b]; });
  const int64_t inter = moe.intermediate;
  static const TensorView kNoBias{};
  std::vector<Device::Projection> gate_up;
  std::vector<float> scales;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto e = static_cast<size_t>(route.experts[order[i]]);
    const auto at = static_cast<int64_t>(i) * inter;
    gate_up.push_back({&w.expert_gate[e], &kNoBias, s.gate + at});
    gate_up.push_back({&w.expert_up[e], &kNoBias, s.up + at});
    scales.push_back(route.weights[order[i]]);
  }
  device.upload(scales.data(), scales.size() * sizeof(float), s.scale);
  const auto k = static_cast<int64_t>(order.size());
  device.matmuls(x, 1, gate_up);
  device.silu_mul(s.gate, s.up, k * inter, s.gate);
  s.zeros->assign(static_cast<size_t>(hidden), 0.0f);
  device.upload(s.zeros->data(), s.zeros->size() * sizeof(float), out);
  std::vector<Device::Projection> downs;
  std::vector<const float*> xs;
  for (int64_t i = 0; i < k; ++i) {
    const auto e = static_cast<size_t>(route.experts[order[static_cast<size_t>(i)]]);
    downs.push_back({&w.expert_down[e], &kNoBias, s.down + i * hidden});
    xs.push_back(s.gate + i * inter);
  }
  device.matmuls_each(1, xs, downs);
  static constexpr int32_t kRow[] = {0};
  for (int64_t i = 0; i < k; ++i) device.scatter_add_rows(s.down + i * hidden, s.scale + i, kRow, hidden, out);
}

}  // namespace

Route route_token(const MoeSpec& moe, const float* logits, const float* bias) {
  Route route =
      moe.routing == Routing::kSigmoidGroupTopK ? sigmoid_group_top_k(moe, logits, bias) : softmax_top_k(moe, logits);
  if (moe.scaling != 1.0f)
    for (float& w : route.weights) w *= moe.scaling;
  return route;
}

Status MoeMlp::reserve(Device& device, int64_t hidden, const MoeSpec& moe, int64_t tokens) {
  TS_RETURN_IF_ERROR(reserve_floats(device, logits_, tokens * moe.experts));
  TS_RETURN_IF_ERROR(reserve_floats(device, xe_, tokens * hidden));
  TS_RETURN_IF_ERROR(reserve_floats(device, sum_, tokens * hidden));
  const int64_t widest = std::max(moe.intermediate, moe.shared_intermediate);
  // An expert's rows are at most the step's tokens; a lone token's top_k experts sit side by side.
  const int64_t rows = std::max(tokens, moe.top_k);
  TS_RETURN_IF_ERROR(reserve_floats(device, gate_, rows * widest));
  TS_RETURN_IF_ERROR(reserve_floats(device, up_, rows * widest));
  TS_RETURN_IF_ERROR(reserve_floats(device, down_, rows * hidden));
  TS_RETURN_IF_ERROR(reserve_floats(device, experts_, tokens * moe.top_k));  // int32
  return reserve_floats(device, scale_, tokens * moe.top_k);
}

ExpertRouting expert_routing(const MoeSpec& moe) {
  return {
      .scoring = moe.routing == Routing::kSigmoidGroupTopK ? ExpertScoring::kSigmoidGroups : ExpertScoring::kSoftmax,
      .experts = moe.experts,
      .top_k = moe.top_k,
      .groups = moe.groups,
      .top_groups = moe.top_groups,
      .normalize = moe.norm_topk_prob,
      .scaling = moe.scaling};
}

void MoeMlp::run(Device& device, const LayerWeights& w, const MoeSpec& moe, const float* x, int64_t tokens,
                 int64_t hidden, float* out, bool add, const RowNorm& norm) {
  static const TensorView kNoBias{};
  const TensorView& bias = moe.routing == Routing::kSigmoidGroupTopK ? w.router_bias : kNoBias;
  // The routed sum goes onto out at once when the device adds it there and no
  // shared expert is to be added to it first; else into `sum` (out itself
  // without `add`), the shared expert onto it, and then onto out.
  const bool shared = moe.shared_intermediate > 0, straight = add && !shared;
  float* sum = add ? sum_.f32() : out;
  // x normalized here (the shared expert reads it too, or the device declined), or by the device.
  RowNorm device_norm = norm;
  const auto normalize = [&] {
    if (device_norm.weight == nullptr) return;
    device.rms_norm(x, tokens, hidden, *norm.weight, norm.eps, norm.scratch);
    x = norm.scratch;
    device_norm = {};
  };
  if (shared) normalize();
  const bool on_device = device.run_experts(
      x, tokens, expert_routing(moe), static_cast<int32_t*>(experts_.data()), scale_.f32(),
      {.gate = w.expert_gate, .up = w.expert_up, .down = w.expert_down}, straight ? out : sum,
      {.logits = logits_.f32(), .router = &w.router, .bias = &bias, .add = straight, .norm = device_norm});
  if (on_device && straight) return;
  if (!on_device) {
    normalize();
    device.matmul(x, tokens, w.router, {}, logits_.f32());
    run_on_host(device, w, moe, x, tokens, hidden, sum);
  }
  if (shared) {  // routed sum + shared(x), as transformers adds them
    device.gate_up(x, tokens, w.shared_gate, {}, w.shared_up, {}, up_.f32(), gate_.f32());
    device.matmul_add(gate_.f32(), tokens, w.shared_down, {}, down_.f32(), sum);
  }
  if (add) device.add(sum, tokens * hidden, out);
}

void MoeMlp::run_on_host(Device& device, const LayerWeights& w, const MoeSpec& moe, const float* x, int64_t tokens,
                         int64_t hidden, float* out) {
  const int64_t experts = moe.experts;
  host_logits_.resize(static_cast<size_t>(tokens * experts));
  device.download(logits_.data(), host_logits_.size() * sizeof(float), host_logits_.data());

  const float* bias = moe.routing == Routing::kSigmoidGroupTopK ? router_bias(device, w) : nullptr;

  if (tokens == 1)
    return run_lone(
        device, w, moe, x, hidden, route_token(moe, host_logits_.data(), bias),
        {.gate = gate_.f32(), .up = up_.f32(), .down = down_.f32(), .scale = scale_.f32(), .zeros = &zeros_}, out);

  // Group the tokens by expert: expert e's rows and weights sit at [begin[e], begin[e + 1]).
  std::vector<std::vector<std::pair<int32_t, float>>> by_expert(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const Route route = route_token(moe, host_logits_.data() + t * experts, bias);
    for (size_t j = 0; j < route.experts.size(); ++j)
      by_expert[static_cast<size_t>(route.experts[j])].emplace_back(static_cast<int32_t>(t), route.weights[j]);
  }
  std::vector<int32_t> rows;
  std::vector<float> scales;
  std::vector<size_t> begin{0};
  for (const auto& routed : by_expert) {
    for (const auto& [row, weight] : routed) {
      rows.push_back(row);
      scales.push_back(weight);
    }
    begin.push_back(rows.size());
  }
  TS_CHECK(static_cast<int64_t>(rows.size()) == tokens * moe.top_k, "routed ", rows.size(), " rows");
  device.upload(scales.data(), scales.size() * sizeof(float), scale_.data());
  zeros_.assign(static_cast<size_t>(tokens * hidden), 0.0f);
  device.upload(zeros_.data(), zeros_.size() * sizeof(float), out);

  const int64_t inter = moe.intermediate;
  for (size_t e = 0; e < by_expert.size(); ++e) {
    const auto n = static_cast<int64_t>(begin[e + 1] - begin[e]);
    if (n == 0) continue;  // not read at all
    const std::span<const int32_t> expert_rows(rows.data() + begin[e], static_cast<size_t>(n));
    device.gather_rows(x, expert_rows, hidden, xe_.f32());
    device.matmul(xe_.f32(), n, w.expert_gate[e], {}, gate_.f32());
    device.matmul(xe_.f32(), n, w.expert_up[e], {}, up_.f32());
    device.silu_mul(gate_.f32(), up_.f32(), n * inter, gate_.f32());
    device.matmul(gate_.f32(), n, w.expert_down[e], {}, down_.f32());
    device.scatter_add_rows(down_.f32(), scale_.f32() + begin[e], expert_rows, hidden, out);
  }
}

const float* MoeMlp::router_bias(Device& device, const LayerWeights& w) {
  const TensorView& b = w.router_bias;
  bias_bytes_.resize(b.nbytes());
  device.download(b.data, b.nbytes(), bias_bytes_.data());
  bias_.resize(static_cast<size_t>(b.numel()));
  for (size_t i = 0; i < bias_.size(); ++i) {
    uint16_t half = 0;  // the binder admits f32, bf16 and f16 only
    if (b.dtype != DType::kF32) std::memcpy(&half, bias_bytes_.data() + 2 * i, 2);
    switch (b.dtype) {
      case DType::kF32: std::memcpy(&bias_[i], bias_bytes_.data() + 4 * i, 4); break;
      case DType::kBF16: bias_[i] = bf16_to_f32(half); break;
      default: bias_[i] = f16_to_f32(half); break;
    }
  }
  return bias_.data();
}

}  // namespace tessera
