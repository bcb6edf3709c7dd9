// Evaluator: renders a parsed Program against a context, one render per
// Evaluator. Implements jinja2's runtime semantics as HF chat templates meet
// them under ImmutableSandboxedEnvironment:
//   - scopes: for-loop bodies, macros, call blocks and {% with %} get their own
//     frame; {% set %} inside them does not leak out (namespace() is the way out);
//   - x.y tries the attribute (methods like dict.items) then the item, x[y] the
//     item then the attribute, and a miss is undefined, not an error;
//   - methods that mutate (list.append, dict.update, ...) are refused as the
//     immutable sandbox refuses them;
//   - limits bound the output size, the work done and the call depth, since
//     templates come from model files.
// Not thread-safe: one Evaluator per render (ChatTemplate::render makes one).
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/status.h"
#include "template/ast.h"
#include "template/value.h"

namespace tessera::tmpl {

struct EvalLimits {
  std::size_t max_output_bytes = 16u << 20;  // also bounds every string value built
  std::uint64_t max_steps = 100'000'000;     // expressions, statements, loop iterations, calls
  int max_call_depth = 256;                  // nested macro calls
};

// Variables of one scope. Lookups walk to the parent; assignments stay here.
class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> parent) : parent_(std::move(parent)) {}
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value) { vars_.insert_or_assign(name, std::move(value)); }

 private:
  // Transparent hashing: lookups by string_view allocate nothing.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::shared_ptr<Frame> parent_;
  std::unordered_map<std::string, Value, Hash, std::equal_to<>> vars_;
};

class Evaluator {
 public:
  // context: the template's variables (a dict value); now: what strftime_now() formats.
  Evaluator(const Program& program, const Value& context, const std::tm& now, const EvalLimits& limits);

  Result<std::string> render();

  // ---- for filters, builtins and methods ----
  Result<Value> call(const Value& callee, Args args);
  // jinja2's sandboxed environment.getattr(obj, name) and getitem(obj, key).
  Result<Value> getattr(const Value& object, std::string_view name);
  Result<Value> getitem(const Value& object, const Value& key);
  // Counts work; fails once the step limit is reached.
  Status step(std::uint64_t n = 1);
  // Fails when a string of `bytes` would exceed the output limit.
  Status check_size(std::size_t bytes) const;
  const std::tm& now() const { return now_; }
  // raise_exception(message): the template's own error, reported as it wrote it.
  Status raise(std::string message);
  const EvalLimits& limits() const { return limits_; }

  // Runs a macro body in a fresh frame under def_frame; used by Macro objects.
  Result<Value> invoke_macro(const MacroDef& macro, const std::shared_ptr<Frame>& def_frame, Args args,
                             std::optional<Value> caller);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Result<Flow> exec(const Body& body);
  Result<Flow> exec_stmt(const Stmt& s);
  Result<Flow> exec_for(const Stmt& s);
  Status exec_output(const Stmt& s);
  Status assign(const Target& target, const Value& value, Frame& frame);
  Result<std::string> capture(const Body& body, const std::shared_ptr<Frame>& frame);
  Status emit(std::string_view text);

  Result<Value> eval(const Expr& e);
  Result<Value> eval_name(const Expr& e);
  Result<Value> eval_compare(const Expr& e);
  Result<Value> eval_call(const Expr& e);
  Result<Value> eval_filter(const Expr& e);
  Result<Value> eval_test(const Expr& e);
  Result<Value> eval_getitem(const Expr& e);
  Result<Args> eval_args(const CallArgs& args);
  Result<Value> make_macro(const MacroDef& macro);

  // The error for a failure at offset (adds the template position).
  Status located(const Status& s) const;

  const Program& program_;
  EvalLimits limits_;
  std::tm now_;
  std::shared_ptr<Frame> globals_;  // context and builtins
  std::shared_ptr<Frame> frame_;    // current scope
  std::string* out_ = nullptr;      // current output buffer
  std::uint64_t steps_ = 0;
  int call_depth_ = 0;
  std::size_t offset_ = 0;            // of the node being evaluated, for error positions
  std::optional<Value> block_value_;  // the captured body for kBlockValue
  bool raised_ = false;               // the error came from raise_exception()
};

}  // namespace tessera::tmpl
