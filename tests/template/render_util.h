// Helpers for the template unit tests: render a source against a JSON context
// at a fixed time, and check tables of cases whose expected strings are what
// Python's jinja2 (Debian python3-jinja2 3.1.2, configured as transformers
// configures it, see tools/template_reference/render.py) renders for them.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "template/chat_template.h"

namespace tessera::template_test {

struct RenderCase {
  const char* source;
  const char* context;  // JSON object; "" for none
  const char* expected;
};

// 2025-03-14 15:09:26, the time the references were rendered at.
inline std::tm fixed_now() {
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mon = 2;
  tm.tm_mday = 14;
  tm.tm_hour = 15;
  tm.tm_min = 9;
  tm.tm_sec = 26;
  timegm(&tm);
  return tm;
}

inline Result<std::string> render(std::string_view source, std::string_view context = "",
                                  ChatTemplate::RenderOptions options = {}) {
  TS_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
  if (!options.now) options.now = fixed_now();
  nlohmann::ordered_json json =
      context.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(context);
  return t.render(json, options);
}

inline void expect_renders(const std::vector<RenderCase>& cases) {
  for (const RenderCase& c : cases) {
    Result<std::string> got = render(c.source, c.context);
    if (!got.ok()) {
      ADD_FAILURE() << "source: " << c.source << "\nerror: " << got.status().to_string();
      continue;
    }
    EXPECT_EQ(*got, c.expected) << "source: " << c.source << "\ncontext: " << c.context;
  }
}

// The error of rendering source (OK when it rendered).
inline Status render_status(std::string_view source, std::string_view context = "",
                            ChatTemplate::RenderOptions options = {}) {
  return render(source, context, options).status();
}

}  // namespace tessera::template_test
