// Tree-walking evaluator; see evaluator.h. Statement semantics follow jinja2's
// compiler (compiler.py), value lookups its sandbox (sandbox.py).
#include "template/evaluator.h"

#include <algorithm>

#include "template/builtins.h"
#include "template/filters.h"
#include "template/lexer.h"
#include "template/methods.h"
#include "template/operators.h"
#include "template/py_string.h"

namespace tessera::tmpl {
namespace {

Status type_error(std::string message) { return Status::invalid_input("TypeError: " + std::move(message)); }

// jinja2's object_type_repr: "None", or "dict object".
std::string owner_name(const Value& object) { return object.is_none() ? "None" : type_name(object) + " object"; }

// The undefined jinja2 returns for a missing attribute: "'dict object' has no attribute 'x'".
Value missing_attribute(const Value& object, std::string_view name) {
  return Value::undefined("UndefinedError: '" + owner_name(object) + "' has no attribute '" + std::string(name) + "'");
}

// ... and for a missing item that is not a name: "list object has no element 5".
Value missing_element(const Value& object, const Value& key) {
  std::string shown;
  if (!append_repr(key, shown).ok()) shown = type_name(key);
  return Value::undefined("UndefinedError: " + owner_name(object) + " has no element " + shown);
}

class Macro final : public Object {
 public:
  Macro(const MacroDef& def, std::weak_ptr<Frame> frame, std::weak_ptr<Frame> globals)
      : def_(def), frame_(std::move(frame)), globals_(std::move(globals)) {}
  std::string_view type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro '" + def_.name + "'>"; }
  bool callable() const override { return true; }
  std::optional<Value> attribute(std::string_view name) const override {
    if (name == "name") return Value::string(def_.name);
    return std::nullopt;
  }
  Result<Value> call(Evaluator& ev, Args args) override {
    // The defining scope is gone only if the macro escaped it (e.g. via a namespace);
    // the template's globals then stand in for it.
    std::shared_ptr<Frame> frame = frame_.lock();
    if (!frame) frame = globals_.lock();
    std::optional<Value> caller;
    if (def_.uses_caller) {
      for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it) {
        if (it->first == "caller") {
          caller = it->second;
          args.keyword.erase(it);
          break;
        }
      }
    }
    return ev.invoke_macro(def_, frame, std::move(args), std::move(caller));
  }

 private:
  const MacroDef& def_;
  std::weak_ptr<Frame> frame_;
  std::weak_ptr<Frame> globals_;
};

// jinja2's LoopContext over an already materialized sequence. loop.cycle and
// loop.changed share the state, so they see the current iteration.
struct LoopState {
  List items;
  std::size_t index0 = 0;
  std::optional<Value> last_changed;
};

class LoopMethod final : public Object {
 public:
  LoopMethod(std::shared_ptr<LoopState> state, std::string_view name) : state_(std::move(state)), name_(name) {}
  std::string_view type_name() const override { return "method"; }
  bool stable_repr() const override { return false; }
  bool callable() const override { return true; }
  Result<Value> call(Evaluator&, Args args) override {
    if (!args.keyword.empty()) return type_error("loop." + name_ + "() takes no keyword arguments");
    if (name_ == "cycle") {
      if (args.positional.empty()) return type_error("no items for cycling given");
      return args.positional[state_->index0 % args.positional.size()];
    }
    Value current = Value::tuple(std::move(args.positional));
    if (state_->last_changed && equals(*state_->last_changed, current)) return Value::boolean(false);
    state_->last_changed = current;
    return Value::boolean(true);
  }

 private:
  std::shared_ptr<LoopState> state_;
  std::string name_;
};

class Loop final : public Object {
 public:
  explicit Loop(List items) : state_(std::make_shared<LoopState>()) { state_->items = std::move(items); }
  std::string_view type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(state_->index0 + 1) + "/" + std::to_string(state_->items.size()) + ">";
  }
  void set_index(std::size_t i) { state_->index0 = i; }

  std::optional<Value> attribute(std::string_view name) const override {
    const List& items = state_->items;
    auto n = static_cast<std::int64_t>(items.size());
    auto i = static_cast<std::int64_t>(state_->index0);
    if (name == "index0") return Value::integer(i);
    if (name == "index") return Value::integer(i + 1);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem") {
      if (i == 0) return Value::undefined("UndefinedError: there is no previous item");
      return items[state_->index0 - 1];
    }
    if (name == "nextitem") {
      if (i + 1 >= n) return Value::undefined("UndefinedError: there is no next item");
      return items[state_->index0 + 1];
    }
    if (name == "cycle" || name == "changed") return Value::object(std::make_shared<LoopMethod>(state_, name));
    return std::nullopt;
  }

 private:
  std::shared_ptr<LoopState> state_;
};

}  // namespace

const Value* Frame::find(std::string_view name) const {
  for (const Frame* f = this; f; f = f->parent_.get()) {
    auto it = f->vars_.find(name);
    if (it != f->vars_.end()) return &it->second;
  }
  return nullptr;
}

Evaluator::Evaluator(const Program& program, const Value& context, const std::tm& now, const EvalLimits& limits)
    : program_(program), limits_(limits), now_(now) {
  auto globals = std::make_shared<Frame>(nullptr);
  install_builtins(*globals);
  if (context.is_dict()) {
    for (const auto& [k, v] : context.dict().entries) {
      if (k.is_string()) globals->set(k.str(), v);
    }
  }
  globals_ = globals;
  frame_ = std::make_shared<Frame>(std::move(globals));
}

Status Evaluator::raise(std::string message) {
  raised_ = true;
  return Status::invalid_input(std::move(message));
}

Status Evaluator::step(std::uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    return Status::invalid_input("template exceeded the limit of " + std::to_string(limits_.max_steps) +
                                 " evaluation steps");
  }
  return Status();
}

Status Evaluator::check_size(std::size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return Status::invalid_input("template output exceeded the limit of " + std::to_string(limits_.max_output_bytes) +
                                 " bytes");
  }
  return Status();
}

Status Evaluator::located(const Status& s) const {
  if (s.ok() || raised_) return s;
  return Status(s.kind(), "template error at " + describe_position(program_.source, offset_) + ": " + s.message());
}

Result<std::string> Evaluator::render() {
  std::string out;
  out_ = &out;
  Result<Flow> flow = exec(program_.body);
  if (!flow.ok()) return located(flow.status());
  return out;
}

Status Evaluator::emit(std::string_view text) {
  TS_RETURN_IF_ERROR(check_size(out_->size() + text.size()));
  out_->append(text);
  return Status();
}

// ---- statements ----

Result<Evaluator::Flow> Evaluator::exec(const Body& body) {
  for (const StmtPtr& s : body) {
    TS_ASSIGN_OR_RETURN(Flow flow, exec_stmt(*s));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<std::string> Evaluator::capture(const Body& body, const std::shared_ptr<Frame>& frame) {
  std::string buffer;
  std::string* saved_out = out_;
  std::shared_ptr<Frame> saved_frame = frame_;
  out_ = &buffer;
  frame_ = frame;
  Result<Flow> flow = exec(body);
  out_ = saved_out;
  frame_ = saved_frame;
  if (!flow.ok()) return flow.status();
  return buffer;
}

Status Evaluator::exec_output(const Stmt& s) {
  for (const ExprPtr& e : s.exprs) {
    TS_ASSIGN_OR_RETURN(Value v, eval(*e));
    if (v.is_string()) {
      TS_RETURN_IF_ERROR(emit(v.str()));
    } else {
      std::string text;
      TS_RETURN_IF_ERROR(append_str(v, text));
      TS_RETURN_IF_ERROR(emit(text));
    }
  }
  return Status();
}

Status Evaluator::assign(const Target& target, const Value& value, Frame& frame) {
  switch (target.kind) {
    case Target::Kind::kName: frame.set(target.name, value); return Status();
    case Target::Kind::kTuple: {
      if (value.is_undefined()) return Status::invalid_input(value.undefined_message());
      TS_ASSIGN_OR_RETURN(List items, iterate(value));
      if (items.size() != target.items.size()) {
        return Status::invalid_input(
            items.size() > target.items.size()
                ? "ValueError: too many values to unpack (expected " + std::to_string(target.items.size()) + ")"
                : "ValueError: not enough values to unpack (expected " + std::to_string(target.items.size()) +
                      ", got " + std::to_string(items.size()) + ")");
      }
      for (std::size_t i = 0; i < items.size(); ++i) TS_RETURN_IF_ERROR(assign(target.items[i], items[i], frame));
      return Status();
    }
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = frame_->find(target.name);
      if (!ns || ns->kind() != Kind::kObject || ns->object().type_name() != "Namespace") {
        return Status::invalid_input("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      }
      static_cast<Namespace&>(ns->object()).set(target.attr, value);
      return Status();
    }
  }
  return Status();
}

Result<Evaluator::Flow> Evaluator::exec_stmt(const Stmt& s) {
  offset_ = s.offset;
  TS_RETURN_IF_ERROR(step());
  switch (s.kind) {
    case StmtKind::kText: TS_RETURN_IF_ERROR(emit(s.text)); break;
    case StmtKind::kOutput: TS_RETURN_IF_ERROR(exec_output(s)); break;
    case StmtKind::kIf:
      for (const auto& [test, body] : s.branches) {
        TS_ASSIGN_OR_RETURN(Value v, eval(*test));
        if (truthy(v)) return exec(body);
      }
      return exec(s.else_body);
    case StmtKind::kFor: return exec_for(s);
    case StmtKind::kSet: {
      TS_ASSIGN_OR_RETURN(Value v, eval(*s.value));
      TS_RETURN_IF_ERROR(assign(s.target, v, *frame_));
      break;
    }
    case StmtKind::kSetBlock: {
      TS_ASSIGN_OR_RETURN(std::string text, capture(s.body, std::make_shared<Frame>(frame_)));
      Value v = Value::string(std::move(text));
      if (s.filter) {
        std::optional<Value> saved = std::move(block_value_);
        block_value_ = v;
        Result<Value> filtered = eval(*s.filter);
        block_value_ = std::move(saved);
        if (!filtered.ok()) return filtered.status();
        v = std::move(filtered).value();
      }
      TS_RETURN_IF_ERROR(assign(s.target, v, *frame_));
      break;
    }
    case StmtKind::kFilterBlock: {
      TS_ASSIGN_OR_RETURN(std::string text, capture(s.body, std::make_shared<Frame>(frame_)));
      std::optional<Value> saved = std::move(block_value_);
      block_value_ = Value::string(std::move(text));
      Result<Value> filtered = eval(*s.filter);
      block_value_ = std::move(saved);
      if (!filtered.ok()) return filtered.status();
      TS_ASSIGN_OR_RETURN(std::string out, to_str(*filtered));
      TS_RETURN_IF_ERROR(emit(out));
      break;
    }
    case StmtKind::kMacro: {
      TS_ASSIGN_OR_RETURN(Value m, make_macro(*s.macro));
      frame_->set(s.macro->name, m);
      break;
    }
    case StmtKind::kCallBlock: {
      TS_ASSIGN_OR_RETURN(Value caller, make_macro(*s.macro));
      if (!s.value) {  // {% generation %}: the body, rendered as a call block renders it
        TS_ASSIGN_OR_RETURN(Value text, call(caller, Args{}));
        TS_ASSIGN_OR_RETURN(std::string out, to_str(text));
        TS_RETURN_IF_ERROR(emit(out));
        break;
      }
      const Expr& call_expr = *s.value;
      TS_ASSIGN_OR_RETURN(Value callee, eval(*call_expr.a));
      TS_ASSIGN_OR_RETURN(Args args, eval_args(call_expr.args));
      args.keyword.emplace_back("caller", caller);
      offset_ = s.offset;
      TS_ASSIGN_OR_RETURN(Value result, call(callee, std::move(args)));
      TS_ASSIGN_OR_RETURN(std::string out, to_str(result));
      TS_RETURN_IF_ERROR(emit(out));
      break;
    }
    case StmtKind::kWith: {
      auto frame = std::make_shared<Frame>(frame_);
      for (const auto& [target, expr] : s.assignments) {
        TS_ASSIGN_OR_RETURN(Value v, eval(*expr));
        TS_RETURN_IF_ERROR(assign(target, v, *frame));
      }
      std::shared_ptr<Frame> saved = frame_;
      frame_ = frame;
      Result<Flow> flow = exec(s.body);
      frame_ = saved;
      return flow;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

Result<Evaluator::Flow> Evaluator::exec_for(const Stmt& s) {
  TS_ASSIGN_OR_RETURN(Value iterable, eval(*s.value));
  TS_ASSIGN_OR_RETURN(List items, iterate(iterable));
  std::shared_ptr<Frame> outer = frame_;
  // jinja2 starts every iteration from the enclosing scope: a {% set %} in the
  // body lasts until the end of that iteration only.
  auto run = [&]() -> Result<bool> {
    if (s.filter) {  // for x in xs if cond: loop.* counts only the items that pass
      List kept;
      for (const Value& item : items) {
        TS_RETURN_IF_ERROR(step());
        frame_ = std::make_shared<Frame>(outer);
        TS_RETURN_IF_ERROR(assign(s.target, item, *frame_));
        TS_ASSIGN_OR_RETURN(Value keep, eval(*s.filter));
        if (truthy(keep)) kept.push_back(item);
      }
      items = std::move(kept);
    }
    auto loop = Value::object(std::make_shared<Loop>(items));
    auto& state = static_cast<Loop&>(loop.object());
    for (std::size_t i = 0; i < items.size(); ++i) {
      TS_RETURN_IF_ERROR(step());
      state.set_index(i);
      offset_ = s.offset;
      frame_ = std::make_shared<Frame>(outer);
      frame_->set("loop", loop);
      TS_RETURN_IF_ERROR(assign(s.target, items[i], *frame_));
      TS_ASSIGN_OR_RETURN(Flow flow, exec(s.body));
      if (flow == Flow::kBreak) break;
    }
    return !items.empty();
  };
  Result<bool> iterated = run();
  frame_ = outer;
  if (!iterated.ok()) return iterated.status();
  if (!*iterated) return exec(s.else_body);
  return Flow::kNormal;
}

// ---- macros ----

Result<Value> Evaluator::make_macro(const MacroDef& macro) {
  return Value::object(std::make_shared<Macro>(macro, frame_, globals_));
}

Result<Value> Evaluator::invoke_macro(const MacroDef& m, const std::shared_ptr<Frame>& def_frame, Args args,
                                      std::optional<Value> caller) {
  TS_RETURN_IF_ERROR(step());
  if (call_depth_ >= limits_.max_call_depth) {
    return Status::invalid_input("template exceeded the macro call depth limit of " +
                                 std::to_string(limits_.max_call_depth));
  }
  auto frame = std::make_shared<Frame>(def_frame);
  std::size_t n = m.params.size();
  std::vector<std::optional<Value>> bound(n);
  for (std::size_t i = 0; i < n && i < args.positional.size(); ++i) bound[i] = args.positional[i];
  Dict extra_kwargs;
  for (auto& [key, value] : args.keyword) {
    auto it = std::find(m.params.begin(), m.params.end(), key);
    if (it != m.params.end()) {
      auto i = static_cast<std::size_t>(it - m.params.begin());
      if (bound[i]) return type_error("macro '" + m.name + "' got multiple values for argument '" + key + "'");
      bound[i] = std::move(value);
    } else {
      extra_kwargs.set(Value::string(key), std::move(value));
    }
  }
  if (args.positional.size() > n && !m.uses_varargs) {
    return type_error("macro '" + m.name + "' takes not more than " + std::to_string(n) + " argument(s)");
  }
  if (!extra_kwargs.entries.empty() && !m.uses_kwargs) {
    return type_error("macro '" + m.name + "' takes no keyword argument '" + extra_kwargs.entries[0].first.str() + "'");
  }
  ++call_depth_;
  std::shared_ptr<Frame> saved_frame = frame_;
  frame_ = frame;
  auto run = [&]() -> Result<std::string> {
    std::size_t first_default = n - m.defaults.size();
    for (std::size_t i = 0; i < n; ++i) {
      Value v;
      if (bound[i]) {
        v = *bound[i];
      } else if (i >= first_default) {
        TS_ASSIGN_OR_RETURN(v, eval(*m.defaults[i - first_default]));  // sees the parameters before it
      } else {
        v = Value::undefined("UndefinedError: parameter '" + m.params[i] + "' was not provided");
      }
      frame->set(m.params[i], std::move(v));
    }
    if (m.uses_caller) frame->set("caller", caller ? *caller : Value::undefined("UndefinedError: No caller defined"));
    if (m.uses_varargs) {
      List rest;
      for (std::size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
      frame->set("varargs", Value::tuple(std::move(rest)));
    }
    if (m.uses_kwargs) frame->set("kwargs", Value::dict(std::move(extra_kwargs)));
    return capture(m.body, frame);
  };
  Result<std::string> text = run();
  frame_ = saved_frame;
  --call_depth_;
  if (!text.ok()) return text.status();
  return Value::string(std::move(text).value());
}

Result<Value> Evaluator::call(const Value& callee, Args args) {
  TS_RETURN_IF_ERROR(step());
  if (callee.is_undefined()) return Status::invalid_input(callee.undefined_message());
  if (callee.kind() != Kind::kObject || !callee.object().callable()) {
    return type_error("'" + type_name(callee) + "' object is not callable");
  }
  std::shared_ptr<Object> object = callee.object_ptr();  // keeps it alive through the call
  return object->call(*this, std::move(args));
}

// ---- lookups (sandboxed environment.getattr / getitem) ----

Result<Value> Evaluator::getattr(const Value& object, std::string_view name) {
  if (object.is_undefined()) return Status::invalid_input(object.undefined_message());
  if (std::optional<Value> m = method_of(object, name)) return *m;
  if (object.is_dict()) {
    if (const Value* v = object.dict().find(name)) return *v;
  } else if (object.kind() == Kind::kObject) {
    if (std::optional<Value> v = object.object().attribute(name)) return *v;
  }
  return missing_attribute(object, name);
}

Result<Value> Evaluator::getitem(const Value& object, const Value& key) {
  if (object.is_undefined()) return Status::invalid_input(object.undefined_message());
  switch (object.kind()) {
    case Kind::kDict:
      if (hashable(key)) {
        if (const Value* v = object.dict().find(key)) return *v;
      }
      break;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kString:
      if (key.is_integral()) {
        std::int64_t i = key.as_int();
        if (object.is_string()) {
          std::u32string t = decode_utf8(object.str());
          auto n = static_cast<std::int64_t>(t.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n)
            return Value::string(encode_utf8(t.substr(static_cast<std::size_t>(i), 1)), object.safe());
        } else {
          auto n = static_cast<std::int64_t>(object.items().size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return object.items()[static_cast<std::size_t>(i)];
        }
        return missing_element(object, key);
      }
      break;
    default: break;
  }
  if (key.is_string()) return getattr(object, key.str());  // jinja2 falls back to the attribute
  return missing_element(object, key);
}

// ---- expressions ----

Result<Args> Evaluator::eval_args(const CallArgs& call_args) {
  Args args;
  for (const ExprPtr& e : call_args.positional) {
    TS_ASSIGN_OR_RETURN(Value v, eval(*e));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [key, e] : call_args.keyword) {
    TS_ASSIGN_OR_RETURN(Value v, eval(*e));
    args.keyword.emplace_back(key, std::move(v));
  }
  if (call_args.star_args) {
    TS_ASSIGN_OR_RETURN(Value v, eval(*call_args.star_args));
    TS_ASSIGN_OR_RETURN(List items, iterate(v));
    for (Value& item : items) args.positional.push_back(std::move(item));
  }
  if (call_args.star_kwargs) {
    TS_ASSIGN_OR_RETURN(Value v, eval(*call_args.star_kwargs));
    if (!v.is_dict()) return type_error("argument after ** must be a mapping, not " + type_name(v));
    for (const auto& [k, val] : v.dict().entries) {
      if (!k.is_string()) return type_error("keywords must be strings");
      args.keyword.emplace_back(k.str(), val);
    }
  }
  return args;
}

Result<Value> Evaluator::eval_name(const Expr& e) {
  if (const Value* v = frame_->find(e.name)) return *v;
  return Value::undefined("UndefinedError: '" + e.name + "' is undefined");
}

Result<Value> Evaluator::eval_compare(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value left, eval(*e.a));
  for (std::size_t i = 0; i < e.compare_ops.size(); ++i) {
    TS_ASSIGN_OR_RETURN(Value right, eval(*e.items[i]));
    bool r = false;
    CompareOp op = e.compare_ops[i];
    if (op == CompareOp::kEq || op == CompareOp::kNe) {
      r = equals(left, right) == (op == CompareOp::kEq);
    } else if (op == CompareOp::kIn || op == CompareOp::kNotIn) {
      TS_ASSIGN_OR_RETURN(bool in, contains(right, left));
      r = in == (op == CompareOp::kIn);
    } else {
      // a <= b is a < b or a == b, as Python's number and sequence orderings give.
      bool flip = op == CompareOp::kGt || op == CompareOp::kGe;
      TS_ASSIGN_OR_RETURN(bool lt, flip ? less_than(right, left) : less_than(left, right));
      r = lt || ((op == CompareOp::kLe || op == CompareOp::kGe) && equals(left, right));
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Result<Value> Evaluator::eval_call(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value callee, eval(*e.a));
  TS_ASSIGN_OR_RETURN(Args args, eval_args(e.args));
  offset_ = e.offset;
  return call(callee, std::move(args));
}

Result<Value> Evaluator::eval_filter(const Expr& e) {
  Value operand;
  if (e.a->kind == ExprKind::kBlockValue) {
    operand = block_value_ ? *block_value_ : Value::string("");
  } else {
    TS_ASSIGN_OR_RETURN(operand, eval(*e.a));
  }
  TS_ASSIGN_OR_RETURN(Args args, eval_args(e.args));
  offset_ = e.offset;
  return apply_filter(*this, e.name, operand, std::move(args));
}

Result<Value> Evaluator::eval_test(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value operand, eval(*e.a));
  TS_ASSIGN_OR_RETURN(Args args, eval_args(e.args));
  offset_ = e.offset;
  TS_ASSIGN_OR_RETURN(bool r, apply_test(*this, e.name, operand, std::move(args)));
  return Value::boolean(r);
}

Result<Value> Evaluator::eval_getitem(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value object, eval(*e.a));
  if (e.b->kind != ExprKind::kSlice) {
    TS_ASSIGN_OR_RETURN(Value key, eval(*e.b));
    offset_ = e.offset;
    return getitem(object, key);
  }
  std::optional<std::int64_t> bounds[3];
  bool valid = true;
  for (int i = 0; i < 3; ++i) {
    if (!e.b->items[i]) continue;
    TS_ASSIGN_OR_RETURN(Value v, eval(*e.b->items[i]));
    if (v.is_none()) continue;
    if (!v.is_integral()) {
      valid = false;  // Python's TypeError, which the sandbox turns into undefined
      continue;
    }
    bounds[i] = v.as_int();
  }
  offset_ = e.offset;
  if (object.is_undefined()) return Status::invalid_input(object.undefined_message());
  bool sliceable = object.is_string() || object.is_sequence();
  if (!valid || !sliceable) {
    return Value::undefined("UndefinedError: " + owner_name(object) + " has no element slice");
  }
  std::u32string text;
  std::size_t size;
  if (object.is_string()) {
    text = decode_utf8(object.str());
    size = text.size();
  } else {
    size = object.items().size();
  }
  TS_ASSIGN_OR_RETURN(std::vector<std::size_t> picked, slice_indices(size, bounds[0], bounds[1], bounds[2]));
  if (object.is_string()) {
    std::u32string out;
    for (std::size_t i : picked) out.push_back(text[i]);
    return Value::string(encode_utf8(out), object.safe());
  }
  List out;
  for (std::size_t i : picked) out.push_back(object.items()[i]);
  return object.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Result<Value> Evaluator::eval(const Expr& e) {
  offset_ = e.offset;
  TS_RETURN_IF_ERROR(step());
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return eval_name(e);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      for (const ExprPtr& item : e.items) {
        TS_ASSIGN_OR_RETURN(Value v, eval(*item));
        items.push_back(std::move(v));
      }
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (std::size_t i = 0; i + 1 < e.items.size(); i += 2) {
        TS_ASSIGN_OR_RETURN(Value k, eval(*e.items[i]));
        TS_ASSIGN_OR_RETURN(Value v, eval(*e.items[i + 1]));
        if (!hashable(k)) return type_error("unhashable type: '" + type_name(k) + "'");
        d.set(std::move(k), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetattr: {
      TS_ASSIGN_OR_RETURN(Value object, eval(*e.a));
      offset_ = e.offset;
      return getattr(object, e.name);
    }
    case ExprKind::kGetitem: return eval_getitem(e);
    case ExprKind::kSlice: return Status::internal("slice outside a subscript");
    case ExprKind::kCall: return eval_call(e);
    case ExprKind::kFilter: return eval_filter(e);
    case ExprKind::kTest: return eval_test(e);
    case ExprKind::kNot: {
      TS_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      return Value::boolean(!truthy(v));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      TS_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      offset_ = e.offset;
      return e.kind == ExprKind::kNeg ? negate(v) : unary_plus(v);
    }
    case ExprKind::kBinary: {
      TS_ASSIGN_OR_RETURN(Value a, eval(*e.a));
      TS_ASSIGN_OR_RETURN(Value b, eval(*e.b));
      offset_ = e.offset;
      return binary_op(e.binary_op, a, b, limits_.max_output_bytes);
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const ExprPtr& part : e.items) {
        TS_ASSIGN_OR_RETURN(Value v, eval(*part));
        TS_RETURN_IF_ERROR(append_str(v, out));
        TS_RETURN_IF_ERROR(check_size(out.size()));
      }
      return Value::string(std::move(out));
    }
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      TS_ASSIGN_OR_RETURN(Value a, eval(*e.a));
      if (truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return eval(*e.b);
    }
    case ExprKind::kCondExpr: {
      TS_ASSIGN_OR_RETURN(Value test, eval(*e.b));
      if (truthy(test)) return eval(*e.a);
      if (e.c) return eval(*e.c);
      return Value::undefined("UndefinedError: the inline if-expression on line " +
                              describe_position(program_.source, e.offset) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::kBlockValue: return block_value_ ? *block_value_ : Value::string("");
  }
  return Status::internal("unknown expression kind");
}

}  // namespace tessera::tmpl
