// Syntax tree of a parsed Jinja template, shaped after jinja2's nodes.py. The
// parser builds it once; evaluators only read it, so one Program may be
// rendered from several threads at once. Nodes are plain structs with the
// fields their kind uses (a tree-walking interpreter reads them directly).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace tessera::tmpl {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : std::uint8_t {
  kConst,       // value
  kName,        // name
  kList,        // items
  kTuple,       // items
  kDict,        // items: key, value, key, value, ...
  kGetattr,     // a.name
  kGetitem,     // a[b]
  kSlice,       // items: start, stop, step (each may be null); only as a Getitem index
  kCall,        // a(args)
  kFilter,      // a | name(args); a is null inside {% filter %} / {% set x | f %} (see kBlockValue)
  kTest,        // a is name(args)
  kNot,         // not a
  kNeg,         // -a
  kPos,         // +a
  kBinary,      // a op b
  kConcat,      // items joined with ~
  kCompare,     // a op0 items[0] op1 items[1] ... (chained)
  kAnd,         // a and b
  kOr,          // a or b
  kCondExpr,    // a if b else c (c may be null)
  kBlockValue,  // the captured body text of a filter block / block set
};

enum class BinaryOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp : std::uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct Expr {
  ExprKind kind;
  std::size_t offset = 0;  // into the normalized source, for error positions
  int height = 1;          // of this subtree; the parser bounds it (evaluation recurses on it)
  Value value;
  std::string name;
  std::vector<ExprPtr> items;
  ExprPtr a, b, c;
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  CallArgs args;
};

// An assignment target: a name, a tuple of targets, or namespace.attr.
struct Target {
  enum class Kind : std::uint8_t { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

// {% macro %} and the caller body of {% call %}.
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  std::size_t offset = 0;
};

enum class StmtKind : std::uint8_t {
  kText,         // text
  kOutput,       // {{ exprs[0] }} or {% print ... %}
  kIf,           // branches, else_body
  kFor,          // target, iter, filter (optional), body, else_body
  kSet,          // target = value
  kSetBlock,     // {% set target | filter %} body {% endset %}
  kMacro,        // macro
  kCallBlock,    // {% call(macro params) call %} macro.body {% endcall %}; also {% generation %}
  kFilterBlock,  // {% filter f %} body {% endfilter %}
  kWith,         // assignments, body
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind;
  std::size_t offset = 0;
  std::string text;
  std::vector<ExprPtr> exprs;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  Target target;
  ExprPtr value;   // kSet value, kFor iter, kCallBlock call (null: {% generation %})
  ExprPtr filter;  // kFor filter, kSetBlock / kFilterBlock filter chain (may be null for kSetBlock)
  std::vector<std::pair<Target, ExprPtr>> assignments;
  std::unique_ptr<MacroDef> macro;
};

struct Program {
  std::string source;  // normalized, for error positions
  Body body;
};

}  // namespace tessera::tmpl
