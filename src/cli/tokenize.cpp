// `tessera tokenize`: text to token ids and back with a Hugging Face tokenizer.json.
//   tessera tokenize --tokenizer DIR/tokenizer.json --in FILE            ids as one JSON array
//   tessera tokenize --tokenizer DIR/tokenizer.json --in FILE --decode   FILE holds a JSON array of ids
// Errors (unreadable or malformed tokenizer.json, an unsupported component,
// invalid UTF-8, a bad id list, an id outside the vocabulary) print one line and
// exit with code 2.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/text_file.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

namespace {

struct TokenizeOptions {
  std::string tokenizer_path;
  std::string in_path;
  bool decode = false;
  bool special = true;
  bool add_special = true;
  bool skip_special = false;
};

Result<std::string> read_input(const std::string& path) {
  if (path != "-") return read_text_file(path);
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) return Status::invalid_input("standard input: read failed");
  return text;
}

Result<std::vector<int32_t>> parse_ids(const std::string& text, const std::string& path) {
  Result<nlohmann::json> parsed = parse_json(text, path);
  if (!parsed.ok()) return parsed.status().with_context("--decode wants a JSON array of token ids");
  const nlohmann::json& json = *parsed;
  if (!json.is_array()) return Status::invalid_input(path + ": --decode wants a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    const auto& id = json[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return Status::invalid_input(path + ": element " + std::to_string(i) + " (" + id.dump() +
                                   ") is not a token id (an integer in [0, 2^31))");
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

Status run_tokenize(const TokenizeOptions& o) {
  TS_ASSIGN_OR_RETURN(const Tokenizer tokenizer, Tokenizer::from_file(o.tokenizer_path));
  TS_ASSIGN_OR_RETURN(const std::string input, read_input(o.in_path));
  if (o.decode) {
    TS_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, parse_ids(input, o.in_path));
    TS_ASSIGN_OR_RETURN(const std::string text, tokenizer.decode(ids, o.skip_special));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return {};
  }
  EncodeOptions options;
  options.parse_special = o.special;
  options.add_special = o.add_special;
  auto ids = tokenizer.encode(input, options);
  if (!ids.ok()) return ids.status().with_context(o.in_path);
  std::string line = "[";
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i) line += ',';
    line += std::to_string((*ids)[i]);
  }
  line += "]\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  return {};
}

}  // namespace

void register_tokenize(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Encode a text file to token ids (one JSON array on stdout) or, with --decode, a JSON array of ids to text, "
      "with a Hugging Face tokenizer.json; the ids equal those of HF's tokenizers library");
  cmd->add_option("--tokenizer", options->tokenizer_path, "Path to tokenizer.json")->required();
  cmd->add_option("--in", options->in_path,
                  "Input file ('-' for stdin): UTF-8 text, or with --decode a JSON array of ids")
      ->required();
  cmd->add_flag("--decode", options->decode,
                "Decode: read a JSON array of ids and print their text (no newline added)");
  cmd->add_option("--special", options->special,
                  "true (default): text of special tokens in the input (e.g. <|im_start|>) becomes those tokens, as "
                  "HF's default; false: it is encoded as plain text (HF split_special_tokens=True), so the input "
                  "cannot inject control tokens. Added tokens that are not special are matched either way")
      ->default_str("true");
  cmd->add_option("--add-special", options->add_special,
                  "true (default): apply the post-processor's template (BOS/EOS), as HF's add_special_tokens=True; "
                  "false: ids of the text only")
      ->default_str("true");
  cmd->add_flag("--skip-special", options->skip_special, "With --decode: leave special tokens out of the text");
  cmd->callback([options, &exit_code] {
    const Status status = run_tokenize(*options);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
