// offer_shards and take_shard: the message order of wire/tp_weights.h on both
// sides of a group.
#include "pipeline/shard_shipping.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"
#include "model/digest.h"
#include "model/shard.h"
#include "wire/byte_io.h"
#include "wire/tp_weights.h"

namespace tessera::pipeline {
namespace {

// Whole u32 words move as f32 elements: a broadcast, send or recv moves bytes unchanged.
std::span<uint8_t> bytes_of(std::vector<uint32_t>& words) {
  return {reinterpret_cast<uint8_t*>(words.data()), words.size() * sizeof(uint32_t)};
}
std::span<uint8_t> bytes_of(uint32_t& word) { return {reinterpret_cast<uint8_t*>(&word), sizeof word}; }

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string named(const std::vector<std::string>& members, size_t rank) {
  return "rank " + std::to_string(rank) + (rank < members.size() ? " (" + members[rank] + ")" : "");
}

// Who asked (answers of every rank), who holds another checkpoint, and whether anything more travels.
struct Answers {
  std::vector<uint32_t> needing{};
  std::vector<uint32_t> other{};
  bool shipping = false;
  bool more() const { return shipping && !needing.empty(); }
};

Result<Answers> gather_answers(Group& group, wire::TpShardAnswer mine, bool shipping) {
  uint32_t word = static_cast<uint32_t>(mine);
  std::vector<uint32_t> all(static_cast<size_t>(group.size()));
  TS_RETURN_IF_ERROR(group.all_gather(bytes_of(word), bytes_of(all), DType::kF32));
  Answers answers{.shipping = shipping};
  for (size_t r = 0; r < all.size(); ++r) {
    TS_ASSIGN_OR_RETURN(const wire::TpShardAnswer answer, wire::decode_tp_answer(all[r]));
    if (answer == wire::TpShardAnswer::kNeeds) answers.needing.push_back(static_cast<uint32_t>(r));
    if (answer == wire::TpShardAnswer::kOther) answers.other.push_back(static_cast<uint32_t>(r));
  }
  return answers;
}

std::string short_digest(const std::string& digest) { return digest.substr(0, 16) + "..."; }

// When a rank's own checkpoint is another than the leader's (2b): every rank
// gathers every rank's digest (`mine`) and fails, naming the first such rank's
// digest and the leader's.
Status refuse_other_checkpoint(Group& group, const std::string& mine, const Answers& answers,
                               const std::vector<std::string>& members) {
  std::vector<uint8_t> digest(mine.begin(), mine.end());
  std::vector<uint8_t> all(wire::kTpDigestChars * static_cast<size_t>(group.size()));
  TS_RETURN_IF_ERROR(group.all_gather(digest, all, DType::kF32));
  const auto of = [&](uint32_t r) {
    return wire::decode_tp_digest(std::span(all).subspan(r * wire::kTpDigestChars, wire::kTpDigestChars));
  };
  const uint32_t r = answers.other.front();
  TS_ASSIGN_OR_RETURN(const std::string theirs, of(r));
  TS_ASSIGN_OR_RETURN(const std::string leaders, of(0));
  return Status::invalid_input("[tp] " + named(members, r) + " holds another checkpoint than the leader's: weights " +
                               "digest " + short_digest(theirs) + ", the leader's " + short_digest(leaders) +
                               " (start the rank with the leader's checkpoint, or without --model and give the " +
                               "leader --tp-ship-weights)");
}

// A tensor's encoding: the quantization for matrices whose elements fill its
// groups (norms and biases travel exact), LZ4 for any.
// GGUF blocks travel as their bytes, LZ4 or not (never re-encoded: offer_shards refuses int8/int4 for them).
wire::Encoding encoding_of(const TensorView& t, const ShipEncoding& ship) {
  if (dtype_is_quantized(t.dtype)) return {DType::kU8, static_cast<uint8_t>(ship.flags & wire::kFlagLz4), 0};
  const bool quantize = t.shape.size() == 2 && ship.group_size != 0 && t.numel() % ship.group_size == 0;
  const uint8_t flags = quantize ? ship.flags : static_cast<uint8_t>(ship.flags & wire::kFlagLz4);
  return {t.dtype, flags, static_cast<uint16_t>(quantize ? ship.group_size : 0)};
}

Status send_padded(Group& group, std::span<const uint8_t> bytes, int rank) {
  if (bytes.empty()) return {};
  std::vector<uint8_t> padded(bytes.begin(), bytes.end());
  padded.resize(wire::tp_padded_bytes(bytes.size()), 0);
  return group.send(padded, DType::kF32, rank);
}

// Rank r's shard: its cut of the leader's layers, its tensors in the order
// they travel (shard_tensors) and their views in the cut.
struct RankShard {
  Model part;
  std::vector<ShardTensor> tensors;
  std::vector<TensorView> views;
};

Result<RankShard> rank_shard(const Model& whole, int r, int ranks) {
  RankShard out;
  TS_ASSIGN_OR_RETURN(out.part, whole.cut(Shard{r, ranks}));
  TS_ASSIGN_OR_RETURN(const ShardPlan plan, plan_shard(whole.config(), whole.arch(), out.part.shard()));
  std::map<std::string, TensorView> views;
  for (auto& [name, view] : named_weights(out.part)) views[name] = view;
  out.tensors = shard_tensors(whole.config(), whole.arch(), whole.range(), plan);
  for (const ShardTensor& t : out.tensors) {
    out.views.push_back(views.at(t.name));
    TS_CHECK(out.views.back().shape == t.shape, t.name, " is ", shape_string(out.views.back().shape), " in rank ", r,
             "'s cut, ", shape_string(t.shape), " in its shard's list");
  }
  return out;
}

// Sends rank `r` its shard's tensors (the order of shard_tensors).
Status ship_rank(Group& group, const RankShard& shard, const ShipEncoding& ship, int r, const std::string& who) {
  uint64_t total = 0;
  for (const TensorView& view : shard.views) total += view.nbytes();
  std::fprintf(stderr, "[tp] shipping %s its shard: %zu tensors, %s\n", who.c_str(), shard.tensors.size(),
               mib(total).c_str());
  for (size_t i = 0; i < shard.views.size(); ++i) {
    const TensorView& view = shard.views[i];
    const std::span bytes(static_cast<const uint8_t*>(view.data), view.nbytes());
    for (const wire::LayerChunk& chunk : wire::encode_layer_chunks(static_cast<uint32_t>(i), encoding_of(view, ship),
                                                                   bytes, wire::kTpShardChunkBytes)) {
      TS_RETURN_IF_ERROR(send_padded(group, chunk.header, r));
      TS_RETURN_IF_ERROR(send_padded(group, chunk.payload, r));
    }
  }
  return {};
}

std::string reason(wire::TpShardReply reply) {
  return reply == wire::TpShardReply::kBadConfig
             ? "it refuses the config (it does not parse, or the layers or rank count do not fit it; see its log)"
             : "the shard is larger than the rank's bound (tessera rank --max-weight-bytes)";
}

}  // namespace

Status offer_shards(Group& group, const Model& whole, const std::optional<ShipEncoding>& ship,
                    const std::vector<std::string>& members) {
  wire::TpOffer offer;
  offer.ranks = static_cast<uint32_t>(group.size());
  offer.begin = static_cast<uint32_t>(whole.range().begin);
  offer.end = static_cast<uint32_t>(whole.range().end);
  offer.digest = weights_digest(whole);
  std::string config;
  if (ship) {
    if (!whole.config().raw)
      return Status::unsupported("--tp-ship-weights needs a safetensors checkpoint with its config.json");
    config = whole.config().raw->dump();
    if (config.size() > wire::kMaxTpConfigBytes)
      return Status::unsupported("--tp-ship-weights: config.json is " + std::to_string(config.size()) +
                                 " bytes, more than the ranks take (" + std::to_string(wire::kMaxTpConfigBytes) + ")");
    bool blocks = false;
    for (const auto& [name, view] : named_weights(whole)) {
      if (dtype_is_quantized(view.dtype)) {
        if ((ship->flags & (wire::kFlagInt8 | wire::kFlagInt4)) != 0)
          return Status::unsupported("--tp-ship-weights " + wire::flags_string(ship->flags) +
                                     " re-encodes weights, and " + name + " holds GGUF " +
                                     std::string(dtype_name(view.dtype)) +
                                     " blocks, which ship as they are: use none or lz4");
        blocks = true;
        continue;
      }
      if (view.dtype != DType::kF32 && view.dtype != DType::kBF16 && view.dtype != DType::kF16)
        return Status::unsupported("--tp-ship-weights: " + name + " is " + std::string(dtype_name(view.dtype)) +
                                   "; only f32, bf16, f16 and GGUF blocks are shipped");
      offer.element_bytes = std::max<uint32_t>(offer.element_bytes, static_cast<uint32_t>(dtype_size(view.dtype)));
    }
    if (blocks) {  // every rank's shard has as many tensors
      TS_ASSIGN_OR_RETURN(const ShardPlan plan, plan_shard(whole.config(), whole.arch(), Shard{0, group.size()}));
      offer.block_tensors =
          static_cast<uint32_t>(shard_tensors(whole.config(), whole.arch(), whole.range(), plan).size());
    }
    offer.shipping = true;
    offer.config_bytes = static_cast<uint32_t>(config.size());
  }
  std::vector<uint8_t> bytes = wire::encode_tp_offer(offer);
  TS_RETURN_IF_ERROR(group.broadcast(bytes, DType::kF32, 0, Wait::kWhileAlive));
  TS_ASSIGN_OR_RETURN(const Answers answers, gather_answers(group, wire::TpShardAnswer::kHolds, offer.shipping));
  if (!answers.other.empty()) return refuse_other_checkpoint(group, offer.digest, answers, members);
  if (!answers.shipping && !answers.needing.empty())
    return Status::invalid_input("[tp] " + named(members, answers.needing.front()) +
                                 " holds no weights (tessera rank without --model): give the leader "
                                 "--tp-ship-weights, or the rank --model");
  if (!answers.more()) return {};
  std::string failed;
  for (const uint32_t r : answers.needing) {
    uint32_t next = r;
    TS_RETURN_IF_ERROR(group.broadcast(bytes_of(next), DType::kF32, 0, Wait::kWhileAlive));
    TS_ASSIGN_OR_RETURN(const RankShard shard, rank_shard(whole, static_cast<int>(r), group.size()));
    TS_RETURN_IF_ERROR(send_padded(group, std::span(reinterpret_cast<const uint8_t*>(config.data()), config.size()),
                                   static_cast<int>(r)));
    if (offer.block_tensors != 0) {
      std::vector<DType> dtypes;
      for (const TensorView& view : shard.views) dtypes.push_back(view.dtype);
      TS_ASSIGN_OR_RETURN(const std::vector<uint8_t> codes, wire::encode_tp_dtypes(dtypes));
      TS_RETURN_IF_ERROR(group.send(codes, DType::kF32, static_cast<int>(r)));
    }
    uint32_t word = 0;
    TS_RETURN_IF_ERROR(group.recv(bytes_of(word), DType::kF32, static_cast<int>(r)));
    TS_ASSIGN_OR_RETURN(const wire::TpShardReply reply, wire::decode_tp_reply(word));
    if (reply != wire::TpShardReply::kTakes) {
      failed += "; " + named(members, r) + " refused its shard: " + reason(reply);
      continue;
    }
    TS_RETURN_IF_ERROR(ship_rank(group, shard, *ship, static_cast<int>(r), named(members, r)));
  }
  uint32_t end = failed.empty() ? wire::kTpWeightsDone : wire::kTpWeightsFailed;
  TS_RETURN_IF_ERROR(group.broadcast(bytes_of(end), DType::kF32, 0, Wait::kWhileAlive));
  if (!failed.empty()) return Status::invalid_input("[tp] shipping the ranks their shards" + failed);
  return {};
}

namespace {

// The rank's turn (4-6): the config, its reply, then its shard's tensors. A
// refusal (answered to the leader, which names it) comes back in `refused` with
// no model: the rank stays in step until the end word.
Result<std::unique_ptr<Model>> receive_turn(Group& group, const wire::TpOffer& offer, uint64_t max_bytes,
                                            const std::function<void(const std::string&)>& log, Status& refused) {
  std::vector<uint8_t> text(wire::tp_padded_bytes(offer.config_bytes));
  TS_RETURN_IF_ERROR(group.recv(text, DType::kF32, 0));
  text.resize(offer.config_bytes);
  std::vector<uint8_t> codes(wire::tp_padded_bytes(offer.block_tensors));
  if (!codes.empty()) TS_RETURN_IF_ERROR(group.recv(codes, DType::kF32, 0));
  // Refusals are answered before they return, so that the leader can name them.
  auto refuse = [&](wire::TpShardReply reply, Status why) -> Result<std::unique_ptr<Model>> {
    uint32_t word = static_cast<uint32_t>(reply);
    TS_RETURN_IF_ERROR(group.send(bytes_of(word), DType::kF32, 0));
    refused = std::move(why);
    return std::unique_ptr<Model>();
  };
  const nlohmann::json json = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded())
    return refuse(wire::TpShardReply::kBadConfig,
                  Status::invalid_input("[tp] the leader's config.json does not parse"));
  Result<ModelConfig> config = parse_model_config(json, check_model_type);
  if (!config.ok())
    return refuse(wire::TpShardReply::kBadConfig, config.status().with_context("[tp] the leader's config.json"));
  Result<ArchSpec> arch = arch_for(*config);
  if (!arch.ok())
    return refuse(wire::TpShardReply::kBadConfig, arch.status().with_context("[tp] the leader's config.json"));
  const LayerRange range{offer.begin, offer.end};
  if (range.end > config->num_hidden_layers)
    return refuse(wire::TpShardReply::kBadConfig,
                  Status::invalid_input("[tp] the leader's layers [" + std::to_string(range.begin) + ", " +
                                        std::to_string(range.end) + ") are not inside its config's " +
                                        std::to_string(config->num_hidden_layers)));
  const Shard shard{group.rank(), group.size()};
  Result<ShardPlan> plan = plan_shard(*config, *arch, shard);
  if (!plan.ok()) return refuse(wire::TpShardReply::kBadConfig, plan.status());
  const std::vector<ShardTensor> tensors = shard_tensors(*config, *arch, range, *plan);
  std::vector<std::optional<DType>> blocks(tensors.size());  // each tensor's GGUF block type, if any
  if (offer.block_tensors != 0) {
    Result<std::vector<std::optional<DType>>> decoded = wire::decode_tp_dtypes(codes, offer.block_tensors);
    if (!decoded.ok()) return refuse(wire::TpShardReply::kBadConfig, decoded.status());
    if (decoded->size() != tensors.size())
      return refuse(wire::TpShardReply::kBadConfig,
                    Status::invalid_input("[tp] the leader's dtypes are of " + std::to_string(decoded->size()) +
                                          " tensors, this rank's shard has " + std::to_string(tensors.size())));
    blocks = std::move(decoded).value();
  }
  // Every shape is the config's (validated: positive and bounded by its parser); the sum is checked anyway.
  // Blocks: a matrix whose rows are whole blocks (the loader binds them for matrices only), their exact bytes.
  std::vector<uint64_t> sizes;  // each tensor's elements, or its blocks' bytes
  uint64_t most = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ShardTensor& t = tensors[i];
    uint64_t elements = 1;
    for (const int64_t dim : t.shape)
      if (dim < 1 || !wire::checked_mul(elements, static_cast<uint64_t>(dim), &elements)) elements = UINT64_MAX;
    uint64_t bytes = UINT64_MAX;
    if (blocks[i]) {
      const std::optional<uint64_t> exact = tensor_bytes(*blocks[i], t.shape);
      if (t.shape.size() != 2 || !exact)
        return refuse(wire::TpShardReply::kBadConfig,
                      Status::invalid_input("[tp] the leader ships " + t.name + " " + shape_string(t.shape) + " as " +
                                            std::string(dtype_name(*blocks[i])) +
                                            " blocks: only a matrix whose rows are whole blocks of " +
                                            std::to_string(dtype_block_elements(*blocks[i])) + " holds them"));
      elements = bytes = *exact;
    } else if (!wire::checked_mul(elements, offer.element_bytes, &bytes)) {
      bytes = UINT64_MAX;
    }
    sizes.push_back(elements);
    if (!wire::checked_add(most, bytes, &most)) most = UINT64_MAX;
  }
  if (most > max_bytes)
    return refuse(wire::TpShardReply::kOverBound,
                  Status::invalid_input("[tp] the shard of layers [" + std::to_string(range.begin) + ", " +
                                        std::to_string(range.end) + ") holds up to " + std::to_string(most) +
                                        " bytes, more than this rank's bound of " + std::to_string(max_bytes) +
                                        " (--max-weight-bytes)"));
  uint32_t takes = static_cast<uint32_t>(wire::TpShardReply::kTakes);
  TS_RETURN_IF_ERROR(group.send(bytes_of(takes), DType::kF32, 0));
  log("receiving its shard of layers [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
      "): " + std::to_string(tensors.size()) + " tensors, at most " + mib(most));

  auto storage = std::make_shared<std::vector<std::vector<uint8_t>>>();
  std::vector<TensorView> views;
  std::vector<uint8_t> header(wire::kLayerChunkHeaderBytes), payload;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ShardTensor& t = tensors[i];
    wire::TpTensorReceiver receiver("[tp] shard tensor " + t.name, static_cast<uint32_t>(i), sizes[i],
                                    offer.element_bytes, blocks[i]);
    do {
      TS_RETURN_IF_ERROR(group.recv(header, DType::kF32, 0));
      TS_ASSIGN_OR_RETURN(const uint64_t padded, receiver.add_header(header));
      payload.resize(padded);
      if (padded > 0) TS_RETURN_IF_ERROR(group.recv(payload, DType::kF32, 0));
      TS_RETURN_IF_ERROR(receiver.add_payload(payload));
    } while (!receiver.complete());
    TS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, receiver.finish());
    views.push_back({receiver.dtype(), t.shape, storage->emplace_back(std::move(bytes)).data()});
  }
  TS_ASSIGN_OR_RETURN(Model model, Model::assemble(*config, range, shard, views, storage));
  log("received its shard: " + std::to_string(model.weight_bytes()) + " bytes of weights (" +
      mib(model.weight_bytes()) + ")");
  return std::make_unique<Model>(std::move(model));
}

}  // namespace

Status take_shard(Group& group, HeldShard& held, uint64_t max_bytes,
                  const std::function<void(const std::string&)>& log) {
  std::vector<uint8_t> bytes(wire::kTpOfferBytes);
  TS_RETURN_IF_ERROR(group.broadcast(bytes, DType::kF32, 0, Wait::kWhileAlive));
  TS_ASSIGN_OR_RETURN(const wire::TpOffer offer, wire::decode_tp_offer(bytes, static_cast<uint32_t>(group.size())));
  if (held.own && (!held.model || held.digest.size() != wire::kTpDigestChars))
    return Status::internal("[tp] this rank holds its own checkpoint without its weights digest");
  const bool same_layers =
      held.model && held.model->range().begin == offer.begin && held.model->range().end == offer.end;
  const bool same_weights = same_layers && held.digest == offer.digest;
  // Its own checkpoint of other layers is refused when the Forwards are set up, naming the layers.
  const bool other = held.own && same_layers && !same_weights;
  const bool holds = held.own || (same_weights && held.model->shard().ranks == group.size());
  const wire::TpShardAnswer mine = other   ? wire::TpShardAnswer::kOther
                                   : holds ? wire::TpShardAnswer::kHolds
                                           : wire::TpShardAnswer::kNeeds;
  TS_ASSIGN_OR_RETURN(const Answers answers, gather_answers(group, mine, offer.shipping));
  if (!answers.other.empty()) return refuse_other_checkpoint(group, held.own ? held.digest : offer.digest, answers, {});
  if (!answers.shipping && !answers.needing.empty())
    return Status::invalid_input("[tp] the leader ships no weights (--tp-ship-weights) and rank " +
                                 std::to_string(answers.needing.front()) + " holds none");
  if (!answers.more()) return {};
  bool received = holds;
  Status refused;
  while (true) {
    uint32_t word = 0;
    TS_RETURN_IF_ERROR(group.broadcast(bytes_of(word), DType::kF32, 0, Wait::kWhileAlive));
    TS_ASSIGN_OR_RETURN(const uint32_t next, wire::decode_tp_next(word, static_cast<uint32_t>(group.size())));
    if (next == wire::kTpWeightsFailed) {
      if (!refused.ok()) return refused;
      return Status::invalid_input("[tp] the leader could not ship every rank its shard (its error names the rank)");
    }
    if (next == wire::kTpWeightsDone) break;
    if (next != static_cast<uint32_t>(group.rank())) continue;
    if (received || !refused.ok()) return Status::invalid_input("[tp] the leader gave this rank a second turn");
    held = {};
    TS_ASSIGN_OR_RETURN(held.model, receive_turn(group, offer, max_bytes, log, refused));
    if (!held.model) continue;  // refused: the leader ends with kTpWeightsFailed
    held.digest = offer.digest;
    received = true;
  }
  if (!refused.ok()) return Status::invalid_input("[tp] the leader ended well after this rank refused its shard");
  if (!received) return Status::invalid_input("[tp] the leader finished shipping without this rank's shard");
  return {};
}

}  // namespace tessera::pipeline
