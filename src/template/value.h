// Value: what a Jinja expression evaluates to, modelled on the Python objects
// jinja2 works with, so that chat templates behave as they do under Python's
// jinja2 (see chat_template.h). Kinds and the Python type each stands for:
//
//   kUndefined  jinja2.Undefined: prints as '', false, iterates as empty; using
//               it any other way fails with its message ("'x' is undefined").
//   kNone kBool kInt kFloat   None, bool, int (64-bit here; overflow is refused),
//               float. bool is an int for arithmetic and ==, as in Python.
//   kString     str (UTF-8). safe() marks markupsafe.Markup (the `safe` filter):
//               `+` with a plain str HTML-escapes the plain side, as Markup does.
//   kList kTuple  list and tuple; lists share storage like Python references.
//   kDict       dict, insertion-ordered.
//   kIterator   a one-shot generator (select, map, ...) or a dict view
//               (keys(), values(), items()); see IteratorKind.
//   kObject     everything callable or special: macros, builtins, bound methods,
//               namespace(), the loop variable.
//
// Values are cheap to copy (shared storage). A Value, and everything it shares,
// belongs to one render call: not thread-safe, never shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace tessera::tmpl {

class Value;
class Object;
using List = std::vector<Value>;

// Python dict: insertion order, keys compared with Python ==.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Sets key (replacing an equal key in place, as Python does).
  void set(Value key, Value value);
};

enum class Kind : std::uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kTuple,
  kDict,
  kIterator,
  kObject,
};

enum class IteratorKind : std::uint8_t { kGenerator, kDictKeys, kDictValues, kDictItems, kReversed };

// A generator is consumed by iteration (cursor moves); dict views iterate again.
struct IteratorState {
  IteratorKind kind = IteratorKind::kGenerator;
  List items;
  std::size_t cursor = 0;
};

class Value {
 public:
  Value() = default;  // undefined, no message
  static Value undefined(std::string message);
  static Value none();
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value floating(double d);
  static Value string(std::string s, bool safe = false);
  static Value list(List items);
  static Value tuple(List items);
  static Value dict(Dict d);
  static Value iterator(IteratorKind kind, List items);
  static Value object(std::shared_ptr<Object> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // bool, int or float (Python numbers.Number).
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  // bool or int: usable as an index.
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }

  bool as_bool() const { return std::get<bool>(payload_); }
  // bool or int as int.
  std::int64_t as_int() const;
  // Any number as double.
  double as_double() const;
  const std::string& str() const { return *std::get<std::shared_ptr<const std::string>>(payload_); }
  bool safe() const { return safe_; }
  // The message used when an undefined value is misused.
  const std::string& undefined_message() const;
  // kList / kTuple storage. Lists are shared, as Python lists are.
  const List& items() const { return *std::get<std::shared_ptr<List>>(payload_); }
  List& mutable_items() const { return *std::get<std::shared_ptr<List>>(payload_); }
  const Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(payload_); }
  IteratorState& iterator_state() const { return *std::get<std::shared_ptr<IteratorState>>(payload_); }
  Object& object() const { return *std::get<std::shared_ptr<Object>>(payload_); }
  const std::shared_ptr<Object>& object_ptr() const { return std::get<std::shared_ptr<Object>>(payload_); }
  // Identity for Python's `is` (sameas) on shared kinds.
  const void* identity() const;

 private:
  using Payload = std::variant<std::monostate, bool, std::int64_t, double, std::shared_ptr<const std::string>,
                               std::shared_ptr<List>, std::shared_ptr<Dict>, std::shared_ptr<IteratorState>,
                               std::shared_ptr<Object>>;
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  Payload payload_;
};

// Positional and keyword arguments of a call, already evaluated.
struct Args {
  List positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Evaluator;

// Callable and special objects. Implementations live beside what they model
// (macros and loop in evaluator.cpp, builtins in builtins.cpp, methods in methods.cpp).
class Object {
 public:
  virtual ~Object() = default;
  // Python's type name, as in "'dict object' has no attribute 'x'".
  virtual std::string_view type_name() const = 0;
  virtual std::string repr() const;
  // False when Python's repr shows a memory address ("<function f at 0x7f...>"):
  // printing such an object is refused rather than made up.
  virtual bool stable_repr() const { return true; }
  virtual bool callable() const { return false; }
  virtual Result<Value> call(Evaluator& evaluator, Args args);
  // An attribute, or nullopt when the object has none of that name.
  virtual std::optional<Value> attribute(std::string_view name) const;
};

// jinja2's namespace(): the one mutable object templates may assign to.
class Namespace final : public Object {
 public:
  std::string_view type_name() const override { return "Namespace"; }
  std::string repr() const override;
  std::optional<Value> attribute(std::string_view name) const override;
  void set(std::string_view name, Value value);

 private:
  Dict attributes_;
};

// Python semantics shared by the evaluator, filters and methods.
bool truthy(const Value& v);
// Python ==.
bool equals(const Value& a, const Value& b);
// Python a < b; TypeError for unorderable types. (a <= b is a < b or a == b.)
Result<bool> less_than(const Value& a, const Value& b);
// The Python type name used in error messages ("str", "NoneType", "dict").
std::string type_name(const Value& v);
// Values usable as dict keys and set members (Python hashable).
bool hashable(const Value& v);
// len(v); TypeError for values without a length.
Result<std::size_t> length(const Value& v);
// The items a for loop over v sees: list items, dict keys, string characters,
// nothing for undefined. Advances a generator.
Result<List> iterate(const Value& v);

// str(v) appended to out; Python's print form: None, True, 1.5, ['a', 1].
Status append_str(const Value& v, std::string& out);
Result<std::string> to_str(const Value& v);
// repr(v): 'text' quoted and escaped as Python does.
Status append_repr(const Value& v, std::string& out);
// Python's repr of a float (shortest round-trip, '1.0', '1e+16', 'inf', 'nan').
std::string float_repr(double d);

// Python's json.dumps with the keyword arguments transformers' tojson passes.
struct JsonOptions {
  bool ensure_ascii = false;
  bool indent_set = false;
  std::string indent;          // the indent string, when indent_set
  std::string item_separator;  // default ", " (or "," with an indent)
  std::string key_separator;   // default ": "
  bool separators_set = false;
  bool sort_keys = false;
};
Result<std::string> to_json(const Value& v, const JsonOptions& options);

// markupsafe.escape of a str.
std::string html_escape(std::string_view s);

}  // namespace tessera::tmpl
