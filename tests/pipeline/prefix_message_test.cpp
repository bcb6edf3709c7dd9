// The prefix cache's control messages over a pipeline (wire/prefix_message.h):
// they round-trip, and each guard refuses what breaks it, naming the message and
// the field: digests that are not 64 lowercase hex characters, more of them than
// a request holds blocks, a reply that claims more blocks than were asked, a
// heartbeat whose KV figures do not add up. Every case was checked to fail with
// its guard removed (the check deleted, the test run, the check restored).
#include <gtest/gtest.h>

#include "wire/control_frame.h"
#include "wire/prefix_message.h"

namespace tessera::wire {
namespace {

using json = nlohmann::json;

void expect_refused(const Status& status, const std::string& needle) {
  EXPECT_EQ(status.kind(), ErrorKind::kInvalidInput) << status.to_string();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.to_string();
}

std::vector<BlockDigest> some_digests(size_t n) {
  std::vector<BlockDigest> out(n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < out[i].size(); ++j) out[i][j] = static_cast<uint8_t>(17 * i + 31 * j);
  return out;
}

TEST(PrefixMessage, RoundTripsThroughTheControlFrame) {
  const std::vector<BlockDigest> chain = some_digests(3);
  Result<json> query = decode_control(*decode_frame(encode_control(7, prefix_query(chain)), kControlOnly));
  ASSERT_TRUE(query.ok()) << query.status().to_string();
  EXPECT_EQ((*query)["type"], "prefix");
  EXPECT_EQ((*query)["blocks"][0].get<std::string>().substr(0, 6), "001f3e");
  EXPECT_EQ(*digests_from_json(*query, "blocks", 3), chain);
  EXPECT_EQ(*prefix_blocks_from_json(prefix_reply(2), 3), 2);

  const json blocks = blocks_message(1, chain);
  EXPECT_EQ(blocks["reuse"], 1);
  EXPECT_EQ(*digests_from_json(blocks, "names", 8), chain);
  EXPECT_FALSE(blocks_message(std::nullopt, {}).contains("reuse"));
  EXPECT_TRUE(digests_from_json(blocks_message(std::nullopt, {}), "names", 0)->empty());

  const Result<std::optional<KvUsage>> usage = kv_usage_from_heartbeat(heartbeat_message(KvUsage{10, 4}));
  ASSERT_TRUE(usage.ok() && usage->has_value());
  EXPECT_EQ((*usage)->blocks, 10u);
  EXPECT_EQ((*usage)->used, 4u);
  EXPECT_FALSE(kv_usage_from_heartbeat(heartbeat_message(std::nullopt))->has_value());  // an older stage's
}

TEST(PrefixMessage, RefusesMalformedDigestsAndTooMany) {
  const json query = prefix_query(some_digests(3));
  expect_refused(digests_from_json(query, "blocks", 2).status(),
                 "prefix: blocks: 3 digests, more than the 2 blocks a request holds");
  expect_refused(digests_from_json(query, "names", 8).status(), "prefix: names must be an array");
  json bad = query;
  bad["blocks"] = "00";
  expect_refused(digests_from_json(bad, "blocks", 8).status(), "prefix: blocks must be an array");
  bad = query;
  bad["blocks"][1] = 5;
  expect_refused(digests_from_json(bad, "blocks", 8).status(), "prefix: blocks[1] must be a string");
  bad = query;
  bad["blocks"][2] = bad["blocks"][2].get<std::string>().substr(1);
  expect_refused(digests_from_json(bad, "blocks", 8).status(), "prefix: blocks[2] has 63 characters, not 64");
  for (const char c : {'A', 'g', ' '}) {
    bad = query;
    std::string text = bad["blocks"][0];
    text[5] = c;
    bad["blocks"][0] = text;
    expect_refused(digests_from_json(bad, "blocks", 8).status(), "prefix: blocks[0] is not lowercase hex");
  }
}

TEST(PrefixMessage, RefusesAReplyBeyondTheQuestionAndAHeartbeatThatDoesNotAddUp) {
  expect_refused(prefix_blocks_from_json(prefix_reply(4), 3).status(), "prefix: blocks 4 not in [0, 3]");
  expect_refused(prefix_blocks_from_json(prefix_reply(-1), 3).status(), "prefix: blocks -1 not in [0, 3]");
  expect_refused(prefix_blocks_from_json({{"type", "prefix"}, {"blocks", "2"}}, 3).status(), "wrong type");
  expect_refused(kv_usage_from_heartbeat(heartbeat_message(KvUsage{4, 5})).status(), "kv_used 5 > kv_blocks 4");
  expect_refused(kv_usage_from_heartbeat({{"type", "heartbeat"}, {"kv_blocks", 4u}}).status(), "missing field kv_used");
}

}  // namespace
}  // namespace tessera::wire
