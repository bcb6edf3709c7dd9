// Post-processor implementations (see post_processor.h).
#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/json_util.h"

namespace tessera::tok {

namespace {

// A template: fixed ids before and after the sequence ($A appears exactly once).
class Template final : public PostProcessor {
 public:
  Template(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }

 private:
  const std::vector<int32_t> before_, after_;
};

class Sequence final : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& part : parts_) part->process(ids);
  }

 private:
  const std::vector<std::unique_ptr<PostProcessor>> parts_;
};

Result<std::unique_ptr<PostProcessor>> make_template(const nlohmann::json& config, const std::string& where) {
  const auto single = config.find("single");
  if (single == config.end() || !single->is_array())
    return Status::invalid_input(where + ": field 'single' must be an array");
  const auto specials = config.find("special_tokens");
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const auto& piece : *single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      TS_ASSIGN_OR_RETURN(const std::string id, get_string(piece["Sequence"], "id", where + " Sequence"));
      if (id != "A") return Status::unsupported(where + ": a single-sequence template using $" + id);
      if (seen_sequence) return Status::unsupported(where + ": a template repeating $A");
      seen_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken"))
      return Status::invalid_input(where + ": template pieces must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    TS_ASSIGN_OR_RETURN(const std::string name, get_string(piece["SpecialToken"], "id", where + " SpecialToken"));
    if (specials == config.end() || !specials->is_object() || !specials->contains(name))
      return Status::invalid_input(where + ": special token '" + name + "' is not in special_tokens");
    const auto& ids = (*specials)[name]["ids"];
    if (!ids.is_array()) return Status::invalid_input(where + ": special_tokens['" + name + "'].ids must be an array");
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        return Status::invalid_input(where + ": special_tokens['" + name + "'] has an id out of range");
      (seen_sequence ? after : before).push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!seen_sequence) return Status::invalid_input(where + ": the single template has no $A");
  return std::unique_ptr<PostProcessor>(new Template(std::move(before), std::move(after)));
}

// RobertaProcessing / BertProcessing: {"cls": [token, id], "sep": [token, id]}.
Result<std::unique_ptr<PostProcessor>> make_cls_sep(const nlohmann::json& config, const std::string& where) {
  int32_t ids[2];
  const char* keys[2] = {"cls", "sep"};
  for (int k = 0; k < 2; ++k) {
    const auto it = config.find(keys[k]);
    if (it == config.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer() ||
        (*it)[1].get<int64_t>() < 0 || (*it)[1].get<int64_t>() > INT32_MAX)
      return Status::invalid_input(where + ": field '" + keys[k] + "' must be [token, id]");
    ids[k] = static_cast<int32_t>((*it)[1].get<int64_t>());
  }
  return std::unique_ptr<PostProcessor>(new Template({ids[0]}, {ids[1]}));
}

}  // namespace

Result<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& config) {
  using Ptr = std::unique_ptr<PostProcessor>;
  if (config.is_null()) return Ptr();
  TS_ASSIGN_OR_RETURN(const std::string type, get_type(config, "post_processor"));
  const std::string where = "post_processor " + type;
  if (type == "TemplateProcessing") return make_template(config, where);
  if (type == "ByteLevel") return Ptr(new Template({}, {}));  // trims offsets only
  if (type == "RobertaProcessing" || type == "BertProcessing") return make_cls_sep(config, where);
  if (type == "Sequence") {
    const auto it = config.find("processors");
    if (it == config.end() || !it->is_array())
      return Status::invalid_input(where + ": field 'processors' must be an array");
    std::vector<Ptr> parts;
    for (const auto& part : *it) {
      TS_ASSIGN_OR_RETURN(Ptr processor, make_post_processor(part));
      if (processor == nullptr) return Status::invalid_input(where + ": a member is null");
      parts.push_back(std::move(processor));
    }
    return Ptr(new Sequence(std::move(parts)));
  }
  return Status::unsupported("post_processor '" + type + "' is not supported by tessera");
}

}  // namespace tessera::tok
