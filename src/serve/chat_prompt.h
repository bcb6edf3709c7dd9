// The prompt ids of a chat request: the messages through the model's chat
// template, its special tokens (<|user|>, <|end|>, ...) parsed as such, while
// the text of the messages stays text: a user who types "<|end|>" gets the
// characters, not the control token (vLLM's and HF's split_special_tokens).
//
// When no message holds special-token text, the rendered prompt is encoded in
// one pass, exactly as `tessera generate --chat` encodes it. When one does, the
// template is rendered again with each content replaced by a sentinel; the
// text around the sentinels is the template's (encoded with special tokens
// parsed) and each content is encoded as plain text. A template that changes a
// content (trims it, say) leaves no place to put it verbatim: such a request
// is refused with kInvalidInput naming the message.
//
// Pure; safe from any thread (the tokenizer and template are).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/status.h"
#include "engine/text_model.h"

namespace tessera::serve {

// `messages`: [{role, content: string}], as the request parser normalizes them.
Result<std::vector<int32_t>> chat_prompt_ids(const TextModel& model, const nlohmann::ordered_json& messages);

}  // namespace tessera::serve
