// Shipping tensor-parallel ranks their shards (pipeline/shard_shipping.h,
// wire/tp_weights.h): over a real TcpGroup on loopback, a rank without weights
// receives bitwise its cut of the leader's checkpoint (every tensor of
// shard_tensors, for every layer range) and keeps it for the next offer of the
// same weights; the refusals name the rank on the leader; the decoders refuse
// what breaks their bounds (each guard's test fails with the guard reverted).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "model/digest.h"
#include "model/fixtures.h"
#include "model/shard.h"
#include "pipeline/shard_shipping.h"
#include "tp/tp_cluster.h"
#include "wire/byte_io.h"
#include "wire/tp_weights.h"

namespace tessera {
namespace {

using testing::fixture_dir;
using testing::TpCluster;

struct Session {
  Status leader, rank;           // rank: the first failure among the ranks
  std::vector<std::string> log;  // the last rank's lines
};

// One group of `held`.size() + 1: the leader offers `whole` (shipping with
// `ship`), rank r takes into held[r - 1] within max_bytes.
Session ship_once(const Model& whole, const std::optional<pipeline::ShipEncoding>& ship,
                  std::vector<pipeline::HeldShard>& held, uint64_t max_bytes = uint64_t{1} << 32) {
  const int ranks = static_cast<int>(held.size()) + 1;
  TpCluster cluster(ranks);
  std::vector<Result<Group>> groups = cluster.connect(false);
  Session s;
  for (auto& g : groups) {
    if (!g.ok()) {
      ADD_FAILURE() << g.status().to_string();
      return s;
    }
  }
  std::vector<Status> status(held.size());
  std::vector<std::thread> threads;
  for (int r = 1; r < ranks; ++r)
    threads.emplace_back([&, r] {
      std::vector<std::string> lines;
      status[r - 1] = pipeline::take_shard(*groups[r], held[r - 1], max_bytes,
                                           [&](const std::string& line) { lines.push_back(line); });
      if (r == ranks - 1) s.log = lines;
    });
  std::vector<std::string> members;
  for (int r = 0; r < ranks; ++r) members.push_back("rank" + std::to_string(r));
  s.leader = pipeline::offer_shards(*groups[0], whole, ship, members);
  for (std::thread& t : threads) t.join();
  for (const Status& st : status)
    if (!st.ok() && s.rank.ok()) s.rank = st;
  return s;
}

Session ship_once(const Model& whole, const std::optional<pipeline::ShipEncoding>& ship, pipeline::HeldShard& held,
                  uint64_t max_bytes = uint64_t{1} << 32) {
  std::vector<pipeline::HeldShard> one(1);
  one[0] = std::move(held);
  Session s = ship_once(whole, ship, one, max_bytes);
  held = std::move(one[0]);
  return s;
}

// What tessera rank --model holds: rank r of `ranks`'s cut of `whole`, and whole's digest.
pipeline::HeldShard own_shard(const Model& whole, int r, int ranks) {
  pipeline::HeldShard held;
  held.own = true;
  held.digest = weights_digest(whole);
  auto cut = whole.cut(Shard{r, ranks});
  EXPECT_TRUE(cut.ok()) << cut.status().to_string();
  if (cut.ok()) held.model = std::make_unique<Model>(std::move(cut).value());
  return held;
}

// Rank r's shard as shipped equals, tensor by tensor and bitwise, its cut of the leader's model.
void expect_shard_is_cut(const Model& whole, const Model& shipped, Shard shard) {
  ASSERT_EQ(shipped.range().begin, whole.range().begin);
  ASSERT_EQ(shipped.range().end, whole.range().end);
  auto cut = whole.cut(shard);
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  std::map<std::string, TensorView> want;
  for (auto& [name, view] : named_weights(*cut)) want[name] = view;
  const auto got = named_weights(shipped);
  ASSERT_FALSE(got.empty());
  for (const auto& [name, view] : got) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(want.count(name));
    const TensorView& w = want.at(name);
    ASSERT_EQ(view.dtype, w.dtype);
    ASSERT_EQ(view.shape, w.shape);
    EXPECT_EQ(std::memcmp(view.data, w.data, view.nbytes()), 0);
  }
}

// Ships `whole` to ranks 1..ranks-1 and checks each shard against its cut.
void expect_shipped_as_cut(const Model& whole, int ranks, const char* encoding) {
  std::vector<pipeline::HeldShard> held(static_cast<size_t>(ranks - 1));
  const Session s = ship_once(whole, *pipeline::parse_ship_encoding(encoding), held);
  ASSERT_TRUE(s.leader.ok()) << s.leader.to_string();
  ASSERT_TRUE(s.rank.ok()) << s.rank.to_string();
  for (int r = 1; r < ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(ranks));
    ASSERT_TRUE(held[r - 1].model);
    expect_shard_is_cut(whole, *held[r - 1].model, Shard{r, ranks});
  }
}

// Every fixture family (fused projections, q/k norms, sandwich norms, biases,
// MoE experts and shared experts, a tied LM head) at 2 and 4 ranks where its
// heads split, and layer ranges that hold the entry, the exit or neither.
TEST(ShardShipping, AShippedShardIsBitwiseTheRanksCutForEveryFamilyAndLayerRange) {
  for (const std::string& name : testing::fixture_names()) {
    auto whole = Model::load(fixture_dir(name));
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    for (const int ranks : {2, 4}) {
      if (!plan_shard(whole->config(), whole->arch(), Shard{0, ranks}).ok()) continue;
      SCOPED_TRACE(name + " at " + std::to_string(ranks) + " ranks");
      expect_shipped_as_cut(*whole, ranks, "lz4");
    }
  }
  for (const std::string& name : {std::string("llama3_f32"), std::string(testing::kShippedModel)}) {
    const int64_t layers = Model::load(fixture_dir(name))->config().num_hidden_layers;
    for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, layers}, {1, layers - 1}}) {
      if (begin >= end) continue;
      SCOPED_TRACE(name + " layers [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
      auto part = Model::load(fixture_dir(name), LayerRange{begin, end});
      ASSERT_TRUE(part.ok()) << part.status().to_string();
      for (const char* encoding : {"none", "lz4"}) expect_shipped_as_cut(*part, 2, encoding);
    }
  }
}

// int8 changes the matrices' values (within its rounding), never their shapes,
// and ships norms exact.
TEST(ShardShipping, Int8ShipsEveryTensorInItsShapeAndNormsExact) {
  auto whole = Model::load(fixture_dir("llama3_f32"));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  pipeline::HeldShard held;
  const Session s = ship_once(*whole, *pipeline::parse_ship_encoding("int8+lz4"), held);
  ASSERT_TRUE(s.leader.ok() && s.rank.ok()) << s.leader.to_string() << s.rank.to_string();
  auto cut = whole->cut(Shard{1, 2});
  ASSERT_TRUE(cut.ok());
  const auto want = named_weights(*cut), got = named_weights(*held.model);
  ASSERT_EQ(want.size(), got.size());
  size_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].second.shape, want[i].second.shape) << want[i].first;
    const bool same = std::memcmp(got[i].second.data, want[i].second.data, want[i].second.nbytes()) == 0;
    if (want[i].second.shape.size() == 1) {
      EXPECT_TRUE(same) << want[i].first << " (1-D) travels exact";
    }
    differ += same ? 0 : 1;
  }
  EXPECT_GT(differ, 0u) << "int8 left every matrix unchanged";
}

// A rank keeps a shard it received: the same offer again ships nothing; a rank
// with its own checkpoint never asks.
TEST(ShardShipping, TheSameOfferAgainShipsNothing) {
  auto whole = Model::load(fixture_dir("llama3_f32"));
  ASSERT_TRUE(whole.ok());
  pipeline::HeldShard held;
  const auto lz4 = *pipeline::parse_ship_encoding("lz4");
  Session first = ship_once(*whole, lz4, held);
  ASSERT_TRUE(first.leader.ok() && first.rank.ok()) << first.leader.to_string() << first.rank.to_string();
  EXPECT_EQ(first.log.size(), 2u);  // receiving, received
  const Model* kept = held.model.get();
  Session second = ship_once(*whole, lz4, held);
  ASSERT_TRUE(second.leader.ok() && second.rank.ok()) << second.leader.to_string() << second.rank.to_string();
  EXPECT_TRUE(second.log.empty()) << second.log.front();
  EXPECT_EQ(held.model.get(), kept);
  // Other layers are other weights: shipped anew.
  auto part = Model::load(fixture_dir("llama3_f32"), LayerRange{1, 2});
  ASSERT_TRUE(part.ok());
  Session third = ship_once(*part, lz4, held);
  ASSERT_TRUE(third.leader.ok() && third.rank.ok()) << third.leader.to_string() << third.rank.to_string();
  EXPECT_EQ(third.log.size(), 2u);
  EXPECT_EQ(held.model->range().begin, 1);
}

TEST(ShardShipping, ARankWithoutWeightsAndALeaderThatShipsNoneFailBothNamingTheRank) {
  auto whole = Model::load(fixture_dir("llama3_f32"));
  ASSERT_TRUE(whole.ok());
  pipeline::HeldShard held;
  const Session s = ship_once(*whole, std::nullopt, held);
  ASSERT_FALSE(s.leader.ok());
  EXPECT_NE(s.leader.message().find("rank 1 (rank1) holds no weights"), std::string::npos) << s.leader.to_string();
  EXPECT_NE(s.leader.message().find("--tp-ship-weights"), std::string::npos) << s.leader.to_string();
  ASSERT_FALSE(s.rank.ok());
  EXPECT_NE(s.rank.message().find("ships no weights"), std::string::npos) << s.rank.to_string();
  // A rank with its own checkpoint needs nothing shipped.
  pipeline::HeldShard own = own_shard(*whole, 1, 2);
  const Session fine = ship_once(*whole, std::nullopt, own);
  EXPECT_TRUE(fine.leader.ok() && fine.rank.ok()) << fine.leader.to_string() << fine.rank.to_string();
}

// A rank started with its own checkpoint (tessera rank --model) whose weights
// are not the leader's, for the same layers, fails the group on every rank,
// named with both digests, shipping or not; its own checkpoint of other layers
// is left to the Forwards' setup, which names the layers (fails with the digest
// comparison in take_shard removed: checked).
TEST(ShardShipping, ARankWithAnotherCheckpointIsRefusedNamingBothDigests) {
  auto whole = Model::load(fixture_dir("llama3_f32"));
  ASSERT_TRUE(whole.ok());
  auto other = Model::random(whole->config(), DType::kF32, 2);
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  const std::string leaders = weights_digest(*whole), theirs = weights_digest(*other);
  ASSERT_NE(leaders, theirs);
  for (const auto& ship :
       {std::optional<pipeline::ShipEncoding>(), std::optional(pipeline::parse_ship_encoding("lz4").value())}) {
    std::vector<pipeline::HeldShard> held;
    held.push_back(own_shard(*whole, 1, 4));
    held.push_back(own_shard(*other, 2, 4));
    held.push_back(own_shard(*whole, 3, 4));
    const Session s = ship_once(*whole, ship, held);
    for (const Status& st : {s.leader, s.rank}) {
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.kind(), ErrorKind::kInvalidInput) << st.to_string();
      EXPECT_NE(st.message().find("holds another checkpoint than the leader's"), std::string::npos) << st.to_string();
      EXPECT_NE(st.message().find(theirs.substr(0, 16)), std::string::npos) << st.to_string();
      EXPECT_NE(st.message().find(leaders.substr(0, 16)), std::string::npos) << st.to_string();
    }
    EXPECT_NE(s.leader.message().find("rank 2 (rank2)"), std::string::npos) << s.leader.to_string();
    EXPECT_TRUE(s.log.empty()) << s.log.front();  // nothing was shipped
  }
  // Its own checkpoint of the leader's weights, for other layers: no refusal here.
  auto part = Model::load(fixture_dir("llama3_f32"), LayerRange{1, 2});
  ASSERT_TRUE(part.ok());
  pipeline::HeldShard own = own_shard(*part, 1, 2);
  const Session layers = ship_once(*whole, std::nullopt, own);
  EXPECT_TRUE(layers.leader.ok() && layers.rank.ok()) << layers.leader.to_string() << layers.rank.to_string();
}

// The rank bounds the shard from the config before it takes a byte (fails with
// the bound check in take_shard's turn removed: checked).
TEST(ShardShipping, AShardLargerThanTheRanksBoundIsRefusedBeforeAnyTensorNamingTheRank) {
  auto whole = Model::load(fixture_dir("llama3_f32"));
  ASSERT_TRUE(whole.ok());
  pipeline::HeldShard held;
  const Session s = ship_once(*whole, *pipeline::parse_ship_encoding("lz4"), held, /*max_bytes=*/4096);
  ASSERT_FALSE(s.leader.ok());
  EXPECT_NE(s.leader.message().find("rank 1 (rank1) refused its shard: the shard is larger than the rank's bound"),
            std::string::npos)
      << s.leader.to_string();
  ASSERT_FALSE(s.rank.ok());
  EXPECT_NE(s.rank.message().find("more than this rank's bound of 4096"), std::string::npos) << s.rank.to_string();
  EXPECT_TRUE(s.log.empty()) << s.log.front();
  EXPECT_FALSE(held.model);
}

std::string gguf_file(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/gguf/models/" + name + ".gguf";
}

// A GGUF's shard ships in the file's own blocks (llama256_f16_q8_0: q8_0
// matrices, f32 norms), bitwise the rank's cut of the file, of the cut's
// dtypes and bytes, whole and in layer ranges, LZ4 or not. The rank bounds it
// at its blocks' bytes: a bound of exactly the shard's bytes takes it, one
// byte less refuses it before anything travels (with the blocks bounded as 4
// bytes an element, as floats, the exact bound was refused: checked).
TEST(ShardShipping, AGgufShardShipsInTheFilesBlocksBoundedByTheirBytes) {
  auto whole = Model::load(gguf_file("llama256_f16_q8_0"));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  bool blocks = false;
  for (const auto& [name, view] : named_weights(*whole)) blocks = blocks || view.dtype == DType::kQ8_0;
  ASSERT_TRUE(blocks);
  for (const char* encoding : {"none", "lz4"}) {
    SCOPED_TRACE(encoding);
    expect_shipped_as_cut(*whole, 2, encoding);
  }
  auto part = Model::load(gguf_file("llama256_f16_q8_0"), LayerRange{1, 2});
  ASSERT_TRUE(part.ok()) << part.status().to_string();
  expect_shipped_as_cut(*part, 2, "lz4");

  const uint64_t exact = whole->cut(Shard{1, 2})->weight_bytes();
  EXPECT_EQ(exact, 840704u);  // tp_process_test derives it from the file's tensors
  pipeline::HeldShard held;
  const Session fits = ship_once(*whole, *pipeline::parse_ship_encoding("lz4"), held, exact);
  ASSERT_TRUE(fits.leader.ok() && fits.rank.ok()) << fits.leader.to_string() << fits.rank.to_string();
  EXPECT_EQ(held.model->weight_bytes(), exact);
  pipeline::HeldShard none;
  const Session over = ship_once(*whole, *pipeline::parse_ship_encoding("lz4"), none, exact - 1);
  ASSERT_FALSE(over.rank.ok());
  EXPECT_NE(over.rank.message().find("holds up to 840704 bytes"), std::string::npos) << over.rank.to_string();
}

// int8/int4 would re-encode the blocks: the leader refuses before the offer.
TEST(ShardShipping, GgufBlocksAreNeverReencoded) {
  auto whole = Model::load(gguf_file("llama256_f16_q8_0"));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  TpCluster cluster(2);
  std::vector<Result<Group>> groups = cluster.connect(false);
  ASSERT_TRUE(groups[0].ok());
  const Status s = pipeline::offer_shards(*groups[0], *whole, *pipeline::parse_ship_encoding("int8+lz4"), {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported);
  EXPECT_NE(s.message().find("holds GGUF q8_0 blocks, which ship as they are: use none or lz4"), std::string::npos)
      << s.to_string();
}

// A column cut (o, down) that would split a block is refused, naming the
// tensor: llama256's Q4_K_M o_proj has k = 256, one q4_k block a row.
TEST(ShardShipping, ACutThroughGgufBlocksIsRefusedNamingTheTensor) {
  auto whole = Model::load(gguf_file("llama256_f16_q4_k_m"));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const Result<Model> cut = whole->cut(Shard{1, 2});
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(cut.status().message().find(
                "layer 0's self_attn.o_proj.weight is q4_k with k = 256: 2 ranks would cut it into 128 "
                "columns each, not whole blocks of 256"),
            std::string::npos)
      << cut.status().to_string();
}

// A leader of hand-made messages (wire/tp_weights.h 1.-5.) offering `config`
// with `codes` as the shard's dtypes (4b.) to rank 1 of 2; returns the rank's
// reply and its status.
std::pair<uint32_t, Status> offer_dtypes(const std::string& config, uint32_t tensors,
                                         const std::vector<uint8_t>& codes) {
  TpCluster cluster(2);
  std::vector<Result<Group>> groups = cluster.connect(false);
  if (!groups[0].ok() || !groups[1].ok()) {
    ADD_FAILURE() << "no group";
    return {};
  }
  Status rank;
  pipeline::HeldShard held;
  std::thread taker([&] { rank = pipeline::take_shard(*groups[1], held, uint64_t{1} << 32, [](const auto&) {}); });
  Group& g = *groups[0];
  wire::TpOffer offer = {.ranks = 2,
                         .begin = 0,
                         .end = 2,
                         .shipping = true,
                         .config_bytes = static_cast<uint32_t>(config.size()),
                         .element_bytes = 4,
                         .block_tensors = tensors,
                         .digest = std::string(wire::kTpDigestChars, 'a')};
  std::vector<uint8_t> bytes = wire::encode_tp_offer(offer);
  uint32_t reply = 99;
  const auto word = [](uint32_t& w) { return std::span(reinterpret_cast<uint8_t*>(&w), sizeof w); };
  [&] {
    ASSERT_TRUE(g.broadcast(bytes, DType::kF32, 0, Wait::kWhileAlive).ok());
    std::vector<uint32_t> answers(2);
    uint32_t holds = 0;
    ASSERT_TRUE(g.all_gather(word(holds), std::span(reinterpret_cast<uint8_t*>(answers.data()), 8), DType::kF32).ok());
    ASSERT_EQ(answers[1], 1u);  // needs
    uint32_t next = 1;
    ASSERT_TRUE(g.broadcast(word(next), DType::kF32, 0, Wait::kWhileAlive).ok());
    std::vector<uint8_t> text(config.begin(), config.end());
    text.resize(wire::tp_padded_bytes(text.size()), 0);
    ASSERT_TRUE(g.send(text, DType::kF32, 1).ok());
    ASSERT_TRUE(g.send(codes, DType::kF32, 1).ok());
    ASSERT_TRUE(g.recv(word(reply), DType::kF32, 1).ok());
    uint32_t end = wire::kTpWeightsFailed;
    ASSERT_TRUE(g.broadcast(word(end), DType::kF32, 0, Wait::kWhileAlive).ok());
  }();
  taker.join();
  return {reply, rank};
}

// The rank takes blocks only where they can be: dtypes of another tensor count,
// or blocks for a tensor that is not a matrix of rows of whole blocks (a norm),
// are refused with reply 1 (the config), named on the rank (each fails with
// its check in receive_turn removed: checked).
TEST(ShardShipping, BlocksWhereTheShardHoldsNoneAreRefused) {
  auto whole = Model::load(gguf_file("llama256_f16_q8_0"));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const std::string config = whole->config().raw->dump();
  auto plan = plan_shard(whole->config(), whole->arch(), Shard{1, 2});
  ASSERT_TRUE(plan.ok());
  const std::vector<ShardTensor> tensors = shard_tensors(whole->config(), whole->arch(), whole->range(), *plan);
  std::vector<DType> dtypes;
  for (const ShardTensor& t : tensors) dtypes.push_back(t.shape.size() == 2 ? DType::kQ8_0 : DType::kF32);
  {
    std::vector<DType> one_more = dtypes;
    one_more.push_back(DType::kQ8_0);
    const auto [reply, status] =
        offer_dtypes(config, static_cast<uint32_t>(one_more.size()), *wire::encode_tp_dtypes(one_more));
    EXPECT_EQ(reply, 1u);
    EXPECT_NE(status.message().find("dtypes are of " + std::to_string(one_more.size()) + " tensors, this rank's "),
              std::string::npos)
        << status.to_string();
  }
  size_t norm = 0;
  while (tensors[norm].shape.size() != 1) ++norm;
  dtypes[norm] = DType::kQ8_0;
  const auto [reply, status] =
      offer_dtypes(config, static_cast<uint32_t>(dtypes.size()), *wire::encode_tp_dtypes(dtypes));
  EXPECT_EQ(reply, 1u);
  EXPECT_NE(status.message().find("ships " + tensors[norm].name + " [256] as q8_0 blocks: only a matrix"),
            std::string::npos)
      << status.to_string();
}

wire::TpOffer valid_offer() {
  return {.ranks = 2,
          .begin = 0,
          .end = 2,
          .shipping = true,
          .config_bytes = 300,
          .element_bytes = 4,
          .digest = std::string(wire::kTpDigestChars, 'a')};
}

TEST(TpWeights, TheOfferRoundTripsAndItsBoundsRefuse) {
  const std::vector<uint8_t> good = wire::encode_tp_offer(valid_offer());
  ASSERT_EQ(good.size(), wire::kTpOfferBytes);
  auto decoded = wire::decode_tp_offer(good, 2);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  EXPECT_EQ(decoded->config_bytes, 300u);
  EXPECT_EQ(decoded->digest, valid_offer().digest);
  auto refused = [](wire::TpOffer offer, uint32_t ranks, const std::string& named) {
    const auto r = wire::decode_tp_offer(wire::encode_tp_offer(offer), ranks);
    ASSERT_FALSE(r.ok()) << named;
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(r.status().message().find(named), std::string::npos) << r.status().to_string();
  };
  refused(valid_offer(), 4, "ranks 2 in a group of 4");
  auto o = valid_offer();
  o.config_bytes = wire::kMaxTpConfigBytes + 1;
  refused(o, 2, "config_bytes");
  o = valid_offer();
  o.element_bytes = 8;
  refused(o, 2, "element_bytes");
  o = valid_offer();
  o.begin = 2;
  refused(o, 2, "layers [2, 2)");
  o = valid_offer();
  o.digest = std::string(wire::kTpDigestChars, 'G');
  refused(o, 2, "digest");
  std::vector<uint8_t> bad = good;
  bad[0] ^= 1;
  EXPECT_FALSE(wire::decode_tp_offer(bad, 2).ok());
  EXPECT_FALSE(wire::decode_tp_offer(std::span(good).first(95), 2).ok());
  EXPECT_FALSE(wire::decode_tp_next(2, 2).ok());
  EXPECT_TRUE(wire::decode_tp_next(1, 2).ok());
  EXPECT_TRUE(wire::decode_tp_next(wire::kTpWeightsFailed, 2).ok());
  EXPECT_TRUE(wire::decode_tp_answer(2).ok());  // another checkpoint
  EXPECT_FALSE(wire::decode_tp_answer(3).ok());
  EXPECT_FALSE(wire::decode_tp_reply(3).ok());
  // A rank's digest (2b.): 64 lowercase hex digits, nothing else.
  const std::string hex(wire::kTpDigestChars, 'f');
  const std::vector<uint8_t> digest(hex.begin(), hex.end());
  EXPECT_EQ(wire::decode_tp_digest(digest).value_or(""), hex);
  EXPECT_FALSE(wire::decode_tp_digest(std::span(digest).first(63)).ok());
  std::vector<uint8_t> upper = digest;
  upper[63] = 'F';
  EXPECT_FALSE(wire::decode_tp_digest(upper).ok());
}

// The chunks of one tensor through TpTensorReceiver as a rank receives them.
Status receive(wire::TpTensorReceiver& receiver, const std::vector<wire::LayerChunk>& chunks) {
  for (const wire::LayerChunk& chunk : chunks) {
    TS_ASSIGN_OR_RETURN(const uint64_t padded, receiver.add_header(chunk.header));
    std::vector<uint8_t> payload = chunk.payload;
    payload.resize(padded);
    TS_RETURN_IF_ERROR(receiver.add_payload(payload));
  }
  return {};
}

std::vector<uint8_t> floats(size_t n) {
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float value = static_cast<float>(i) * 0.25f - 3.0f;
    std::memcpy(out.data() + 4 * i, &value, 4);
  }
  return out;
}

TEST(TpWeights, ATensorsChunksRoundTripInEveryEncoding) {
  const std::vector<uint8_t> data = floats(307200);
  for (const uint8_t flags : {uint8_t{0}, wire::kFlagLz4, wire::kFlagInt8, uint8_t(wire::kFlagInt4 | wire::kFlagLz4)}) {
    const bool quantized = (flags & (wire::kFlagInt8 | wire::kFlagInt4)) != 0;
    const wire::Encoding encoding{DType::kF32, flags, static_cast<uint16_t>(quantized ? 64 : 0)};
    wire::TpTensorReceiver receiver("t", 3, 307200, 4);
    ASSERT_TRUE(receive(receiver, wire::encode_layer_chunks(3, encoding, data, wire::kTpShardChunkBytes)).ok());
    ASSERT_TRUE(receiver.complete());
    auto bytes = receiver.finish();
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    ASSERT_EQ(bytes->size(), data.size());
    if (!quantized) {
      EXPECT_EQ(*bytes, data);
    }
  }
}

// The first chunk must declare exactly the tensor's elements (fails with that
// check in TpTensorReceiver::add_header removed: checked), in a dtype of at most
// the offer's element_bytes, under the tensor's index.
TEST(TpWeights, ATensorsChunksMustDeclareExactlyItsShape) {
  const std::vector<uint8_t> data = floats(64);
  const wire::Encoding f32{DType::kF32, 0, 0};
  {
    wire::TpTensorReceiver receiver("t", 0, 64, 4);
    const Status fewer = receive(receiver, wire::encode_layer_chunks(0, f32, std::span(data).first(128), 1 << 20));
    ASSERT_FALSE(fewer.ok());
    EXPECT_NE(fewer.message().find("are not 64 elements"), std::string::npos) << fewer.to_string();
  }
  {
    wire::TpTensorReceiver receiver("t", 0, 32, 2);  // 32 bf16 elements: 64 bytes; f32 is refused
    const Status wider = receive(receiver, wire::encode_layer_chunks(0, f32, std::span(data).first(64), 1 << 20));
    ASSERT_FALSE(wider.ok());
  }
  {
    wire::TpTensorReceiver receiver("t", 1, 64, 4);
    EXPECT_FALSE(receive(receiver, wire::encode_layer_chunks(0, f32, data, 1 << 20)).ok()) << "another index";
  }
  {
    wire::TpTensorReceiver receiver("t", 0, 64, 4);
    const auto chunks = wire::encode_layer_chunks(0, f32, data, 100);
    ASSERT_TRUE(receiver.add_header(chunks[0].header).ok());
    EXPECT_FALSE(receiver.add_header(chunks[0].header).ok()) << "a header where a payload was due";
    EXPECT_FALSE(receiver.add_payload(std::vector<uint8_t>(96)).ok()) << "refuses everything after an error";
  }
}

// 4b.: one code a tensor (0 a float, 1..5 a block type), padding zero; every
// other byte is refused (each check removed, its line here failed: checked).
TEST(TpWeights, TheDtypesRoundTripAndTheirBoundsRefuse) {
  const std::vector<DType> dtypes = {DType::kF32, DType::kQ4_K, DType::kBF16, DType::kQ6_K, DType::kQ8_0};
  auto codes = wire::encode_tp_dtypes(dtypes);
  ASSERT_TRUE(codes.ok()) << codes.status().to_string();
  ASSERT_EQ(codes->size(), 8u);
  auto decoded = wire::decode_tp_dtypes(*codes, 5);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  const std::vector<std::optional<DType>> want = {std::nullopt, DType::kQ4_K, std::nullopt, DType::kQ6_K, DType::kQ8_0};
  EXPECT_EQ(*decoded, want);
  EXPECT_EQ(wire::encode_tp_dtypes(std::vector<DType>{DType::kI32}).status().kind(), ErrorKind::kUnsupported);
  std::vector<uint8_t> bad = *codes;
  bad[1] = 6;
  EXPECT_NE(wire::decode_tp_dtypes(bad, 5).status().message().find("tensor 1's code 6"), std::string::npos);
  bad = *codes;
  bad[6] = 1;
  EXPECT_NE(wire::decode_tp_dtypes(bad, 5).status().message().find("padding byte 6"), std::string::npos);
  EXPECT_FALSE(wire::decode_tp_dtypes(*codes, 9).ok());
  // The offer's block_tensors: only when shipping, at most kMaxTpShardTensors.
  auto o = valid_offer();
  o.block_tensors = 21;
  EXPECT_EQ(wire::decode_tp_offer(wire::encode_tp_offer(o), 2).value().block_tensors, 21u);
  o.block_tensors = wire::kMaxTpShardTensors + 1;
  EXPECT_FALSE(wire::decode_tp_offer(wire::encode_tp_offer(o), 2).ok());
  o = valid_offer();
  o.shipping = false;
  o.config_bytes = o.element_bytes = 0;
  o.block_tensors = 1;
  EXPECT_FALSE(wire::decode_tp_offer(wire::encode_tp_offer(o), 2).ok());
}

// A tensor of blocks comes as exactly its bytes, u8, LZ4 or not, and is kept as
// its block type; f32 chunks, another byte count and int8 are refused.
TEST(TpWeights, ATensorOfBlocksComesAsExactlyItsBytes) {
  std::vector<uint8_t> blocks(2 * 144);  // [2, 256] of q4_k
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>(i * 13);
  for (const uint8_t flags : {uint8_t{0}, wire::kFlagLz4}) {
    wire::TpTensorReceiver receiver("t", 2, blocks.size(), 4, DType::kQ4_K);
    ASSERT_TRUE(
        receive(receiver, wire::encode_layer_chunks(2, {DType::kU8, flags, 0}, blocks, wire::kTpShardChunkBytes)).ok());
    EXPECT_EQ(receiver.dtype(), DType::kQ4_K);
    EXPECT_EQ(receiver.finish().value(), blocks);
  }
  {
    wire::TpTensorReceiver receiver("t", 0, blocks.size(), 4, DType::kQ4_K);
    const std::vector<uint8_t> f32 = floats(blocks.size() / 4);
    const Status s = receive(receiver, wire::encode_layer_chunks(0, {DType::kF32, 0, 0}, f32, 1 << 20));
    EXPECT_NE(s.message().find("f32 not allowed"), std::string::npos) << s.to_string();
  }
  {
    wire::TpTensorReceiver receiver("t", 0, blocks.size(), 4, DType::kQ4_K);
    const Status s =
        receive(receiver, wire::encode_layer_chunks(0, {DType::kU8, 0, 0}, std::span(blocks).first(144), 1 << 20));
    EXPECT_NE(s.message().find("are not 288 elements"), std::string::npos) << s.to_string();
  }
  {
    wire::TpTensorReceiver receiver("t", 0, blocks.size(), 4, DType::kQ4_K);
    std::vector<uint8_t> header = wire::encode_layer_chunks(0, {DType::kU8, 0, 0}, blocks, 1 << 20)[0].header;
    header[1] = wire::kFlagInt8;  // the flags byte, and a group of 64: int8 quantizes floats only
    header[2] = 64;
    const Result<uint64_t> int8 = receiver.add_header(header);
    EXPECT_NE(int8.status().message().find("u8 cannot be quantized"), std::string::npos) << int8.status().to_string();
  }
}

}  // namespace
}  // namespace tessera
