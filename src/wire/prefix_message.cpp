#include "wire/prefix_message.h"

#include <string>

#include "wire/control_frame.h"

namespace tessera::wire {

using json = nlohmann::json;

namespace {

constexpr char kHex[] = "0123456789abcdef";

json hex_list(std::span<const BlockDigest> digests) {
  json list = json::array();
  for (const BlockDigest& d : digests) {
    std::string text(2 * d.size(), '0');
    for (size_t i = 0; i < d.size(); ++i) {
      text[2 * i] = kHex[d[i] >> 4];
      text[2 * i + 1] = kHex[d[i] & 15];
    }
    list.push_back(std::move(text));
  }
  return list;
}

int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

json prefix_query(std::span<const BlockDigest> chain) { return {{"type", "prefix"}, {"blocks", hex_list(chain)}}; }

json prefix_reply(int64_t blocks) { return {{"type", "prefix"}, {"blocks", blocks}}; }

json blocks_message(std::optional<int64_t> reuse, std::span<const BlockDigest> names) {
  json message = {{"type", "blocks"}, {"names", hex_list(names)}};
  if (reuse) message["reuse"] = *reuse;
  return message;
}

Result<std::vector<BlockDigest>> digests_from_json(const json& message, const char* name, size_t max_blocks) {
  const std::string where = text_or(message, "type", "?") + ": " + name;
  auto list = message.find(name);
  if (list == message.end() || !list->is_array()) return Status::invalid_input(where + " must be an array");
  if (list->size() > max_blocks)
    return Status::invalid_input(where + ": " + std::to_string(list->size()) + " digests, more than the " +
                                 std::to_string(max_blocks) + " blocks a request holds");
  std::vector<BlockDigest> digests(list->size());
  for (size_t i = 0; i < digests.size(); ++i) {
    const json& item = (*list)[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!item.is_string()) return Status::invalid_input(at + " must be a string");
    const auto& text = item.get_ref<const std::string&>();
    if (text.size() != 2 * digests[i].size())
      return Status::invalid_input(at + " has " + std::to_string(text.size()) + " characters, not 64");
    for (size_t j = 0; j < digests[i].size(); ++j) {
      const int high = nibble(text[2 * j]), low = nibble(text[2 * j + 1]);
      if (high < 0 || low < 0) return Status::invalid_input(at + " is not lowercase hex");
      digests[i][j] = static_cast<uint8_t>(high << 4 | low);
    }
  }
  return digests;
}

Result<int64_t> prefix_blocks_from_json(const json& reply, int64_t asked) {
  TS_ASSIGN_OR_RETURN(const int64_t blocks, field<int64_t>(reply, "blocks"));
  if (blocks < 0 || blocks > asked)
    return Status::invalid_input("prefix: blocks " + std::to_string(blocks) + " not in [0, " + std::to_string(asked) +
                                 "] (the blocks asked)");
  return blocks;
}

json heartbeat_message(std::optional<KvUsage> usage) {
  json message = {{"type", "heartbeat"}};
  if (usage) {
    message["kv_blocks"] = usage->blocks;
    message["kv_used"] = usage->used;
  }
  return message;
}

Result<std::optional<KvUsage>> kv_usage_from_heartbeat(const json& heartbeat) {
  if (!heartbeat.contains("kv_blocks")) return std::optional<KvUsage>();
  KvUsage usage;
  TS_ASSIGN_OR_RETURN(usage.blocks, field<uint64_t>(heartbeat, "kv_blocks"));
  TS_ASSIGN_OR_RETURN(usage.used, field<uint64_t>(heartbeat, "kv_used"));
  if (usage.used > usage.blocks)
    return Status::invalid_input("heartbeat: kv_used " + std::to_string(usage.used) + " > kv_blocks " +
                                 std::to_string(usage.blocks));
  return std::optional<KvUsage>(usage);
}

}  // namespace tessera::wire
