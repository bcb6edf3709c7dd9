// Tokenizer facade (see tokenizer.h): loading and the encode/decode pipelines.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/text_file.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace tessera {

using tok::AddedToken;
using tok::AddedTokens;
using tok::Piece;

struct Tokenizer::Impl {
  // Set once while loading, then never changed.
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tok::BpeModel> model;
  std::unique_ptr<tok::PostProcessor> post_processor;
  std::unique_ptr<tok::Decoder> decoder;
  AddedTokens added;

  mutable std::mutex cache_mutex;
  mutable tok::WordCache cache;  // GUARDED_BY(cache_mutex)

  void encode_words(const Piece& piece, std::vector<int32_t>& ids, tok::WordCache* cache_or_null) const {
    std::vector<Piece> words{piece};
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(words);
    for (const Piece& word : words) model->tokenize(word.text, ids, cache_or_null);
  }
};

Result<Tokenizer> Tokenizer::from_file(const std::string& path) {
  TS_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  return from_json(text, path);
}

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text, std::string_view name) {
  const std::string prefix = std::string(name) + ": ";
  TS_ASSIGN_OR_RETURN(const nlohmann::json root, parse_json(json_text, name));
  if (!root.is_object()) return Status::invalid_input(prefix + "the top level must be a JSON object");
  auto field = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json null_json;
    const auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  if (!field("truncation").is_null()) return Status::unsupported(prefix + "truncation is not supported by tessera");
  if (!field("padding").is_null()) return Status::unsupported(prefix + "padding is not supported by tessera");

  auto impl = std::make_shared<Impl>();
  auto with_prefix = [&](const Status& s) { return s.with_context(name); };
  const nlohmann::json& model = field("model");
  if (!model.is_object()) return Status::invalid_input(prefix + "field 'model' must be an object");
  std::string model_type = "BPE";
  if (model.contains("type")) {
    auto type = tok::get_string(model, "type", "model");
    if (!type.ok()) return with_prefix(type.status());
    model_type = *type;
  }
  if (model_type != "BPE")
    return Status::unsupported(prefix + "model '" + model_type + "' is not supported by tessera");
  auto bpe = tok::BpeModel::from_json(model);
  if (!bpe.ok()) return with_prefix(bpe.status());
  impl->model = std::move(*bpe);

  auto normalizer = tok::make_normalizer(field("normalizer"));
  if (!normalizer.ok()) return with_prefix(normalizer.status());
  impl->normalizer = std::move(*normalizer);
  auto pre_tokenizer = tok::make_pre_tokenizer(field("pre_tokenizer"));
  if (!pre_tokenizer.ok()) return with_prefix(pre_tokenizer.status());
  impl->pre_tokenizer = std::move(*pre_tokenizer);
  auto post_processor = tok::make_post_processor(field("post_processor"));
  if (!post_processor.ok()) return with_prefix(post_processor.status());
  impl->post_processor = std::move(*post_processor);
  auto decoder = tok::make_decoder(field("decoder"));
  if (!decoder.ok()) return with_prefix(decoder.status());
  impl->decoder = std::move(*decoder);
  const tok::BpeModel& bpe_model = *impl->model;
  auto added = AddedTokens::from_json(
      field("added_tokens"), impl->normalizer.get(),
      [&bpe_model](std::string_view content) { return bpe_model.token_to_id(content); }, bpe_model.vocab_size());
  if (!added.ok()) return with_prefix(added.status());
  impl->added = std::move(*added);
  return Tokenizer(std::move(impl));
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  if (!tok::is_valid_utf8(text))
    return Status::invalid_input("text is not valid UTF-8 (first bad byte at offset " +
                                 std::to_string(tok::valid_utf8_prefix(text)) + ")");
  const Impl& impl = *impl_;
  std::unique_lock<std::mutex> lock(impl.cache_mutex, std::try_to_lock);
  tok::WordCache* cache = lock.owns_lock() ? &impl.cache : nullptr;

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  std::vector<AddedTokens::Segment> raw_segments, normalized_segments;
  impl.added.split(text, /*normalized_tokens=*/false, options.parse_special, raw_segments);
  for (const auto& raw : raw_segments) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string normalized(text.substr(raw.start, raw.end - raw.start));
    if (impl.normalizer) TS_RETURN_IF_ERROR(impl.normalizer->normalize(normalized));
    impl.added.split(normalized, /*normalized_tokens=*/true, options.parse_special, normalized_segments);
    for (const auto& segment : normalized_segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
        continue;
      }
      Piece piece{normalized.substr(segment.start, segment.end - segment.start), raw.start == 0 && segment.start == 0};
      impl.encode_words(piece, ids, cache);
    }
  }
  if (options.add_special && impl.post_processor) impl.post_processor->process(ids);
  return ids;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& impl = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (const AddedToken* added = impl.added.find(id)) {
      if (!(skip_special && added->special)) tokens.push_back(added->content);
      continue;
    }
    const std::string* token = impl.model->id_to_token(id);
    if (token == nullptr)
      return Status::invalid_input("id " + std::to_string(id) + " (position " + std::to_string(i) +
                                   ") is not in the vocabulary (ids are below " + std::to_string(id_limit()) + ")");
    tokens.push_back(*token);
  }
  if (!impl.decoder) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  impl.decoder->decode_chain(tokens);
  std::string text;
  for (const auto& token : tokens) text += token;
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& added : impl_->added.tokens())
    if (added.content == token) return added.id;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = impl_->added.find(id)) return added->content;
  if (const std::string* token = impl_->model->id_to_token(id)) return *token;
  return std::nullopt;
}

int32_t Tokenizer::id_limit() const {
  int32_t limit = impl_->model->id_limit();
  for (const AddedToken& added : impl_->added.tokens()) limit = std::max(limit, added.id + 1);
  return limit;
}

}  // namespace tessera
