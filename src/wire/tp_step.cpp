#include "wire/tp_step.h"

#include <limits>

#include "wire/byte_io.h"

namespace tessera::wire {

namespace {

void put_i32(std::vector<uint8_t>& out, int32_t value) { put_u32(out, static_cast<uint32_t>(value)); }

std::vector<uint8_t> header(TpStepKind kind, const TpStep* step) {
  std::vector<uint8_t> out;
  out.reserve(kTpStepHeaderBytes);
  put_u32(out, kTpStepMagic);
  put_u32(out, static_cast<uint32_t>(kind));
  uint32_t blocks = 0, tokens = 0;
  if (step)
    for (const TpStepPart& part : step->parts) {
      blocks += static_cast<uint32_t>(part.blocks.size());
      tokens += static_cast<uint32_t>(part.tokens);
    }
  put_u32(out, tokens);
  put_u32(out, step ? static_cast<uint32_t>(step->parts.size()) : 0);
  put_u32(out, blocks);
  put_u32(out, step ? static_cast<uint32_t>(step->copies.size()) : 0);
  put_u32(out, step && step->all_logits ? 1 : 0);
  put_u32(out, step ? static_cast<uint32_t>(step->input) : 0);
  return out;
}

}  // namespace

std::vector<uint8_t> encode_tp_step_header(const TpStep& step) { return header(TpStepKind::kStep, &step); }
std::vector<uint8_t> encode_tp_stop() { return header(TpStepKind::kStop, nullptr); }

std::vector<uint8_t> encode_tp_step_body(const TpStep& step) {
  std::vector<uint8_t> out;
  for (const int32_t id : step.ids) put_i32(out, id);
  for (const TpStepPart& part : step.parts) {
    put_i32(out, part.tokens);
    put_i32(out, part.pos0);
    put_u32(out, static_cast<uint32_t>(part.blocks.size()));
  }
  for (const TpStepPart& part : step.parts)
    for (const int32_t block : part.blocks) put_i32(out, block);
  for (const auto& [from, to] : step.copies) {
    put_i32(out, from);
    put_i32(out, to);
  }
  return out;
}

Result<TpStepHeader> decode_tp_step_header(std::span<const uint8_t> bytes, const TpStepLimits& limits) {
  if (bytes.size() != kTpStepHeaderBytes)
    return decode_error("tp step header: ", bytes.size(), " bytes, expected ", kTpStepHeaderBytes);
  if (get_u32(bytes, 0) != kTpStepMagic) return decode_error("tp step header: bad magic ", get_u32(bytes, 0));
  const uint32_t kind = get_u32(bytes, 4);
  TpStepHeader h;
  h.tokens = get_u32(bytes, 8);
  h.parts = get_u32(bytes, 12);
  h.blocks = get_u32(bytes, 16);
  h.copies = get_u32(bytes, 20);
  const uint32_t logits = get_u32(bytes, 24), input = get_u32(bytes, 28);
  if (kind == static_cast<uint32_t>(TpStepKind::kStop)) {
    if (h.tokens || h.parts || h.blocks || h.copies || logits || input)
      return decode_error("tp step header: a stop with counts");
    return h;
  }
  if (kind != static_cast<uint32_t>(TpStepKind::kStep)) return decode_error("tp step header: unknown kind ", kind);
  h.kind = TpStepKind::kStep;
  if (h.tokens < 1 || h.tokens > limits.max_tokens)
    return decode_error("tp step header: ", h.tokens, " tokens, expected [1, ", limits.max_tokens, "]");
  if (h.parts < 1 || h.parts > h.tokens)
    return decode_error("tp step header: ", h.parts, " parts for ", h.tokens, " tokens");
  uint64_t most_blocks = 0;
  if (!checked_mul(h.parts, limits.blocks, &most_blocks) || h.blocks < h.parts || h.blocks > most_blocks)
    return decode_error("tp step header: ", h.blocks, " block table entries for ", h.parts, " parts of a pool of ",
                        limits.blocks, " blocks");
  if (h.copies > h.parts) return decode_error("tp step header: ", h.copies, " block copies for ", h.parts, " parts");
  if (logits > 1) return decode_error("tp step header: logits ", logits, " is not 0 or 1");
  h.all_logits = logits == 1;
  const uint32_t expected = limits.hidden_size > 0 ? 1 : 0;
  if (input != expected)
    return decode_error("tp step header: input ", input, " (0 token ids, 1 hidden states), this rank takes ",
                        expected == 1 ? "hidden states" : "token ids");
  h.input = static_cast<TpStepInput>(input);
  uint64_t hidden_bytes = 0;
  if (h.input == TpStepInput::kHidden &&
      (!checked_mul(uint64_t{h.tokens} * sizeof(float), limits.hidden_size, &hidden_bytes) ||
       hidden_bytes > std::numeric_limits<size_t>::max()))
    return decode_error("tp step header: hidden states of ", h.tokens, " tokens x ", limits.hidden_size, " overflow");
  if (h.body_bytes() > kMaxTpStepBodyBytes)
    return decode_error("tp step header: a body of ", h.body_bytes(), " bytes exceeds ", kMaxTpStepBodyBytes);
  return h;
}

Result<TpStep> decode_tp_step_body(const TpStepHeader& h, std::span<const uint8_t> bytes, const TpStepLimits& limits) {
  if (h.kind != TpStepKind::kStep) return decode_error("tp step body: the header is not a step");
  if (bytes.size() != h.body_bytes())
    return decode_error("tp step body: ", bytes.size(), " bytes, expected ", h.body_bytes());
  TpStep step;
  step.all_logits = h.all_logits;
  step.input = h.input;
  size_t at = 0;
  auto next = [&] {
    const uint32_t value = get_u32(bytes, at);
    at += 4;
    return value;
  };
  step.ids.resize(h.input == TpStepInput::kIds ? h.tokens : 0);
  for (int32_t& id : step.ids) {
    const uint32_t value = next();
    if (value >= limits.vocab) return decode_error("tp step body: token id ", value, " >= vocabulary ", limits.vocab);
    id = static_cast<int32_t>(value);
  }
  step.parts.resize(h.parts);
  uint64_t tokens = 0, blocks = 0;
  for (TpStepPart& part : step.parts) {
    const uint32_t part_tokens = next(), pos0 = next(), table = next();
    uint64_t end = 0, covered = 0;
    if (part_tokens < 1 || !checked_add(pos0, part_tokens, &end) || end > limits.max_tokens)
      return decode_error("tp step body: a part of ", part_tokens, " tokens at position ", pos0,
                          " is outside a pool of ", limits.max_tokens, " positions");
    if (table < 1 || table > limits.blocks || !checked_mul(table, limits.block_size, &covered) || covered < end)
      return decode_error("tp step body: a table of ", table, " blocks for positions up to ", end);
    tokens += part_tokens;
    blocks += table;
    part.tokens = static_cast<int32_t>(part_tokens);
    part.pos0 = static_cast<int32_t>(pos0);
    part.blocks.resize(table);
  }
  if (tokens != h.tokens) return decode_error("tp step body: parts of ", tokens, " tokens, header ", h.tokens);
  if (blocks != h.blocks) return decode_error("tp step body: tables of ", blocks, " blocks, header ", h.blocks);
  for (TpStepPart& part : step.parts) {
    for (int32_t& block : part.blocks) {
      const uint32_t value = next();
      if (value >= limits.blocks) return decode_error("tp step body: block ", value, " >= pool ", limits.blocks);
      block = static_cast<int32_t>(value);
    }
  }
  step.copies.resize(h.copies);
  for (auto& [from, to] : step.copies) {
    const uint32_t a = next(), b = next();
    if (a >= limits.blocks || b >= limits.blocks || a == b)
      return decode_error("tp step body: block copy ", a, " -> ", b, " in a pool of ", limits.blocks);
    from = static_cast<int32_t>(a);
    to = static_cast<int32_t>(b);
  }
  return step;
}

}  // namespace tessera::wire
