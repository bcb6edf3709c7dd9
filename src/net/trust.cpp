#include "net/trust.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/text_file.h"
#include "net/socket.h"

namespace tessera::net {
namespace {

using nlohmann::json;

constexpr std::string_view kFingerprintPrefix = "sha256:";
constexpr size_t kFingerprintHexDigits = 64;
constexpr size_t kMaxNodeName = 64;  // a certificate CN (ub-common-name)

Status refuse(const std::string& field, const std::string& why) { return Status::invalid_input(field + ": " + why); }

Status check_keys(const json& object, const std::string& where, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (std::string_view name : allowed) known = known || key == name;
    if (known) continue;
    std::string list;
    for (std::string_view name : allowed) list += (list.empty() ? "" : ", ") + std::string(name);
    return refuse(where.empty() ? key : where + "." + key, "unknown key (allowed: " + list + ")");
  }
  return {};
}

// A required (or, when present, optional) non-empty string member.
Result<std::string> string_member(const json& object, const std::string& key, const std::string& field) {
  auto it = object.find(key);
  if (it == object.end()) return refuse(field, "missing");
  if (!it->is_string() || it->get_ref<const std::string&>().empty())
    return refuse(field, "expected a non-empty string");
  return it->get<std::string>();
}

// nlohmann::json keeps the last of duplicate keys silently; a duplicated
// "fingerprint" is exactly the kind of edit that must not pass unnoticed.
struct DuplicateKeyFinder {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  }
};

Result<TrustedNode> parse_node(const json& entry, const std::string& where, bool ca_mode) {
  if (!entry.is_object()) return refuse(where, "expected an object");
  TS_RETURN_IF_ERROR(check_keys(entry, where, {"name", "address", "fingerprint"}));
  TrustedNode node;
  TS_ASSIGN_OR_RETURN(node.name, string_member(entry, "name", where + ".name"));
  if (node.name.size() > kMaxNodeName) {
    return refuse(where + ".name", "longer than " + std::to_string(kMaxNodeName) + " bytes (a certificate CN)");
  }
  TS_ASSIGN_OR_RETURN(node.address, string_member(entry, "address", where + ".address"));
  Result<Endpoint> endpoint = parse_endpoint(node.address);
  if (!endpoint.ok()) return refuse(where + ".address", endpoint.status().message());

  if (!entry.contains("fingerprint")) {
    if (!ca_mode) return refuse(where + ".fingerprint", "missing (required when the trust file names no \"ca\")");
    return node;
  }
  const json& fingerprint = entry["fingerprint"];
  if (!fingerprint.is_string() || !is_fingerprint(fingerprint.get_ref<const std::string&>())) {
    return refuse(where + ".fingerprint", "expected \"sha256:\" and 64 hex digits");
  }
  node.fingerprint = fingerprint.get<std::string>();
  for (char& c : node.fingerprint) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return node;
}

}  // namespace

bool is_fingerprint(std::string_view text) {
  if (text.size() != kFingerprintPrefix.size() + kFingerprintHexDigits || !text.starts_with(kFingerprintPrefix)) {
    return false;
  }
  for (char c : text.substr(kFingerprintPrefix.size())) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

const TrustedNode* TrustFile::find_name(std::string_view name) const {
  for (const TrustedNode& node : nodes) {
    if (node.name == name) return &node;
  }
  return nullptr;
}

const TrustedNode* TrustFile::find_fingerprint(std::string_view fingerprint) const {
  if (fingerprint.empty()) return nullptr;
  for (const TrustedNode& node : nodes) {
    if (node.fingerprint == fingerprint) return &node;
  }
  return nullptr;
}

Result<TrustFile> parse_trust_file(std::string_view json_text, const std::filesystem::path& base_dir) {
  DuplicateKeyFinder duplicates;
  // Comments are allowed: operators annotate their trust files.
  TS_ASSIGN_OR_RETURN(const json root,
                      parse_json(json_text, "trust file", {.observe = std::ref(duplicates), .allow_comments = true}));
  if (!duplicates.duplicate.empty()) return refuse(duplicates.duplicate, "key appears twice in one object");
  if (!root.is_object()) return Status::invalid_input("expected a JSON object at the top level");
  TS_RETURN_IF_ERROR(check_keys(root, "", {"cluster", "ca", "nodes"}));

  TrustFile trust;
  TS_ASSIGN_OR_RETURN(trust.cluster, string_member(root, "cluster", "cluster"));
  if (root.contains("ca")) {
    TS_ASSIGN_OR_RETURN(const std::string ca, string_member(root, "ca", "ca"));
    const std::filesystem::path ca_path(ca);
    trust.ca_file = ca_path.is_absolute() ? ca_path : base_dir / ca_path;
  }

  auto nodes = root.find("nodes");
  if (nodes == root.end()) return refuse("nodes", "missing");
  if (!nodes->is_array() || nodes->empty()) return refuse("nodes", "expected a non-empty array");
  for (size_t i = 0; i < nodes->size(); ++i) {
    const std::string where = "nodes[" + std::to_string(i) + "]";
    TS_ASSIGN_OR_RETURN(TrustedNode node, parse_node((*nodes)[i], where, trust.ca_mode()));
    for (size_t j = 0; j < trust.nodes.size(); ++j) {
      const std::string other = "nodes[" + std::to_string(j) + "]";
      if (trust.nodes[j].name == node.name) {
        return refuse(where + ".name", "'" + node.name + "' is also " + other + ".name");
      }
      if (!node.fingerprint.empty() && trust.nodes[j].fingerprint == node.fingerprint) {
        return refuse(where + ".fingerprint", "same as " + other + ".fingerprint");
      }
    }
    trust.nodes.push_back(std::move(node));
  }
  return trust;
}

Result<TrustFile> read_trust_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return Status::not_found(path.string() + ": does not exist");
  TS_ASSIGN_OR_RETURN(const std::string text, read_text_file(path.string(), uint64_t{16} << 20));
  Result<TrustFile> trust = parse_trust_file(text, path.parent_path());
  if (!trust.ok()) return trust.status().with_context(path.string());
  return trust;
}

}  // namespace tessera::net
