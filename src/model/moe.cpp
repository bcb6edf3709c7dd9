#include "model/moe.h"

#include <algorithm>
#include <cmath>
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

}  // namespace

Route route_token(const MoeSpec& moe, const float* logits) {
  const auto n = static_cast<size_t>(moe.experts);
  // Softmax in f32, as transformers computes it (dtype=torch.float).
  const float max = *std::max_element(logits, logits + n);
  std::vector<float> probs(n);
  float sum = 0;
  for (size_t e = 0; e < n; ++e) {
    probs[e] = std::exp(logits[e] - max);
    sum += probs[e];
  }
  for (float& p : probs) p /= sum;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  const auto k = static_cast<size_t>(moe.top_k);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
  Route route;
  route.experts.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  for (const int32_t e : route.experts) route.weights.push_back(probs[static_cast<size_t>(e)]);
  if (moe.norm_topk_prob) {
    float top = 0;  // summed in descending order, as torch sums topk's values
    for (const float w : route.weights) top += w;
    for (float& w : route.weights) w /= top;
  }
  return route;
}

Status MoeMlp::reserve(Device& device, int64_t hidden, const MoeSpec& moe, int64_t tokens) {
  TS_RETURN_IF_ERROR(reserve_floats(device, logits_, tokens * moe.experts));
  TS_RETURN_IF_ERROR(reserve_floats(device, xe_, tokens * hidden));
  TS_RETURN_IF_ERROR(reserve_floats(device, gate_, tokens * moe.intermediate));
  TS_RETURN_IF_ERROR(reserve_floats(device, up_, tokens * moe.intermediate));
  TS_RETURN_IF_ERROR(reserve_floats(device, down_, tokens * hidden));
  return reserve_floats(device, scale_, tokens * moe.top_k);
}

void MoeMlp::run(Device& device, const LayerWeights& w, const MoeSpec& moe, const float* x, int64_t tokens,
                 int64_t hidden, float* out) {
  const int64_t experts = moe.experts;
  host_logits_.resize(static_cast<size_t>(tokens * experts));
  device.matmul(x, tokens, w.router, {}, logits_.f32());
  device.download(logits_.data(), host_logits_.size() * sizeof(float), host_logits_.data());

  // Group the tokens by expert: expert e's rows and weights sit at [begin[e], begin[e + 1]).
  std::vector<std::vector<std::pair<int32_t, float>>> by_expert(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const Route route = route_token(moe, host_logits_.data() + t * experts);
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

}  // namespace tessera
