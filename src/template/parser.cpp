// Jinja parser; see parser.h. Each parse_* function mirrors the jinja2
// Parser method of the same name.
#include "template/parser.h"

#include <functional>

#include "template/filters.h"
#include "template/lexer.h"

namespace tessera::tmpl {
namespace {

class Parser {
 public:
  explicit Parser(LexedTemplate lexed) : source_(std::move(lexed.source)), tokens_(std::move(lexed.tokens)) {}

  Result<std::shared_ptr<const Program>> run() {
    auto program = std::make_shared<Program>();
    TS_ASSIGN_OR_RETURN(program->body, subparse({}));
    TS_RETURN_IF_ERROR(check_filters(program->body, false));
    program->source = std::move(source_);
    return std::shared_ptr<const Program>(std::move(program));
  }

 private:
  // ---- token stream ----
  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::kOperator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().type == TokenType::kName && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kData: return "template data / text";
      case TokenType::kVariableBegin: return "begin of print statement";
      case TokenType::kVariableEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "begin of statement block";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kString: return "string";
      case TokenType::kInteger: return "integer";
      case TokenType::kFloat: return "float";
      case TokenType::kEof: return "end of template";
      default: return t.text;
    }
  }

  Status fail(std::size_t offset, const std::string& message) const {
    return Status::invalid_input("template syntax error at " + describe_position(source_, offset) + ": " + message);
  }
  Status fail(const std::string& message) const { return fail(cur().offset, message); }

  Status expect_op(std::string_view op) {
    if (!skip_op(op)) return fail("expected token '" + std::string(op) + "', got '" + describe(cur()) + "'");
    return Status();
  }
  Status expect_type(TokenType type, std::string_view what) {
    if (cur().type != type) return fail("expected token '" + std::string(what) + "', got '" + describe(cur()) + "'");
    next();
    return Status();
  }
  Status expect_block_end() { return expect_type(TokenType::kBlockEnd, "end of statement block"); }
  Result<std::string> expect_name() {
    if (cur().type != TokenType::kName) return fail("expected token 'name', got '" + describe(cur()) + "'");
    std::string name = cur().text;
    next();
    return name;
  }

  // Guards recursion on untrusted input.
  struct DepthGuard {
    explicit DepthGuard(int& depth) : depth_(depth) { ++depth_; }
    ~DepthGuard() { --depth_; }
    int& depth_;
  };
  Status check_depth() const {
    if (depth_ > kMaxNesting) return fail("template nested too deeply (limit " + std::to_string(kMaxNesting) + ")");
    return Status();
  }

  static ExprPtr make(ExprKind kind, std::size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }
  // Records the height of a finished node; the evaluator and the destructors
  // recurse on it, so chains like a+a+a+... are bounded like bracket nesting.
  Status seal(Expr& e) const {
    int h = 0;
    auto take = [&](const ExprPtr& c) {
      if (c) h = std::max(h, c->height);
    };
    for (const ExprPtr& c : e.items) take(c);
    take(e.a);
    take(e.b);
    take(e.c);
    for (const ExprPtr& c : e.args.positional) take(c);
    for (const auto& kw : e.args.keyword) take(kw.second);
    take(e.args.star_args);
    take(e.args.star_kwargs);
    e.height = h + 1;
    if (e.height > kMaxNesting) {
      return fail(e.offset, "expression nested too deeply (limit " + std::to_string(kMaxNesting) + ")");
    }
    return Status();
  }

  static StmtPtr make_stmt(StmtKind kind, std::size_t offset) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->offset = offset;
    return s;
  }

  // ---- statements ----

  // Parses until one of end_tags (a block whose first name is one of them), which is left current.
  Result<Body> subparse(const std::vector<std::string_view>& end_tags) {
    DepthGuard guard(depth_);
    TS_RETURN_IF_ERROR(check_depth());
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (!end_tags.empty()) return fail_eof(end_tags);
        return body;
      }
      if (t.type == TokenType::kData) {
        auto s = make_stmt(StmtKind::kText, t.offset);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::kVariableBegin) {
        next();
        auto s = make_stmt(StmtKind::kOutput, t.offset);
        TS_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(false, true, {}, false));
        s->exprs.push_back(std::move(e));
        TS_RETURN_IF_ERROR(expect_type(TokenType::kVariableEnd, "end of print statement"));
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        next();
        if (cur().type == TokenType::kName) {
          for (std::string_view tag : end_tags) {
            if (cur().text == tag) return body;
          }
        }
        TS_ASSIGN_OR_RETURN(StmtPtr s, parse_statement(end_tags));
        if (s) body.push_back(std::move(s));
        TS_RETURN_IF_ERROR(expect_block_end());
      } else {
        return fail("unexpected '" + describe(t) + "'");
      }
    }
  }

  Status fail_eof(const std::vector<std::string_view>& end_tags) const {
    std::string expected;
    for (std::size_t i = 0; i < end_tags.size(); ++i) {
      expected += (i ? " or '" : "'") + std::string(end_tags[i]) + "'";
    }
    return fail("Unexpected end of template. Jinja was looking for the following tags: " + expected + ".");
  }

  Result<Body> parse_statements(const std::vector<std::string_view>& end_tags, bool drop_needle) {
    skip_op(":");
    TS_RETURN_IF_ERROR(expect_block_end());
    TS_ASSIGN_OR_RETURN(Body body, subparse(end_tags));
    if (cur().type == TokenType::kEof) return fail_eof(end_tags);
    if (drop_needle) next();
    return body;
  }

  Result<StmtPtr> parse_statement(const std::vector<std::string_view>& end_tags) {
    if (cur().type != TokenType::kName) return fail("tag name expected");
    const std::string tag = cur().text;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "print") return parse_print();
    if (tag == "generation") return parse_generation();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return fail("'" + tag + "' outside loop");
      auto s = make_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, cur().offset);
      next();
      return s;
    }
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block" ||
        tag == "autoescape") {
      return Status::unsupported("tag '" + tag + "' is not supported (at " + describe_position(source_, cur().offset) +
                                 ")");
    }
    std::string message = "Encountered unknown tag '" + tag + "'.";
    if (!end_tags.empty()) {
      message += " Jinja was looking for the following tags:";
      for (std::size_t i = 0; i < end_tags.size(); ++i)
        message += (i ? " or '" : " '") + std::string(end_tags[i]) + "'";
      message += ".";
    }
    return fail(message);
  }

  Result<StmtPtr> parse_for() {
    auto s = make_stmt(StmtKind::kFor, cur().offset);
    next();
    TS_ASSIGN_OR_RETURN(s->target, parse_assign_target(true, false, {"in"}, false));
    if (!skip_name("in")) return fail("expected token 'in', got '" + describe(cur()) + "'");
    TS_ASSIGN_OR_RETURN(s->value, parse_tuple(false, false, {"recursive"}, false));
    if (skip_name("if")) {
      TS_ASSIGN_OR_RETURN(s->filter, parse_expression(true));
    }
    if (is_name("recursive")) return Status::unsupported("recursive for loops are not supported");
    ++loop_depth_;
    auto body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = std::move(body).value();
    bool has_else = is_name("else");
    next();
    if (has_else) {
      TS_ASSIGN_OR_RETURN(s->else_body, parse_statements({"endfor"}, true));
    }
    return s;
  }

  Result<StmtPtr> parse_if() {
    auto s = make_stmt(StmtKind::kIf, cur().offset);
    next();
    while (true) {
      TS_ASSIGN_OR_RETURN(ExprPtr test, parse_tuple(false, false, {}, false));
      TS_ASSIGN_OR_RETURN(Body body, parse_statements({"elif", "else", "endif"}, false));
      s->branches.emplace_back(std::move(test), std::move(body));
      std::string tag = cur().text;
      next();
      if (tag == "elif") continue;
      if (tag == "else") {
        TS_ASSIGN_OR_RETURN(s->else_body, parse_statements({"endif"}, true));
      }
      break;
    }
    return s;
  }

  Result<StmtPtr> parse_set() {
    std::size_t offset = cur().offset;
    next();
    TS_ASSIGN_OR_RETURN(Target target, parse_assign_target(true, false, {}, true));
    if (skip_op("=")) {
      auto s = make_stmt(StmtKind::kSet, offset);
      s->target = std::move(target);
      TS_ASSIGN_OR_RETURN(s->value, parse_tuple(false, true, {}, false));
      return s;
    }
    auto s = make_stmt(StmtKind::kSetBlock, offset);
    s->target = std::move(target);
    if (is_op("|")) {
      TS_ASSIGN_OR_RETURN(s->filter, parse_filter(make(ExprKind::kBlockValue, offset), false));
    }
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    auto body = parse_statements({"endset"}, true);
    loop_depth_ = saved_loop_depth;
    if (!body.ok()) return body.status();
    s->body = std::move(body).value();
    return s;
  }

  Status parse_signature(MacroDef& m) {
    TS_RETURN_IF_ERROR(expect_op("("));
    while (!is_op(")")) {
      if (!m.params.empty()) TS_RETURN_IF_ERROR(expect_op(","));
      TS_ASSIGN_OR_RETURN(std::string name, expect_name());
      if (skip_op("=")) {
        TS_ASSIGN_OR_RETURN(ExprPtr d, parse_expression(true));
        m.defaults.push_back(std::move(d));
      } else if (!m.defaults.empty()) {
        return fail("non-default argument follows default argument");
      }
      m.params.push_back(std::move(name));
    }
    return expect_op(")");
  }

  // Macro bodies are their own function: break/continue do not reach an enclosing loop.
  Result<Body> parse_function_body(std::string_view end_tag) {
    int saved = loop_depth_;
    loop_depth_ = 0;
    auto body = parse_statements({end_tag}, true);
    loop_depth_ = saved;
    return body;
  }

  Result<StmtPtr> parse_macro() {
    auto s = make_stmt(StmtKind::kMacro, cur().offset);
    next();
    s->macro = std::make_unique<MacroDef>();
    s->macro->offset = s->offset;
    TS_ASSIGN_OR_RETURN(s->macro->name, expect_name());
    TS_RETURN_IF_ERROR(parse_signature(*s->macro));
    TS_ASSIGN_OR_RETURN(s->macro->body, parse_function_body("endmacro"));
    scan_special_names(*s->macro);
    return s;
  }

  Result<StmtPtr> parse_call_block() {
    auto s = make_stmt(StmtKind::kCallBlock, cur().offset);
    next();
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = "caller";
    s->macro->offset = s->offset;
    if (is_op("(")) TS_RETURN_IF_ERROR(parse_signature(*s->macro));
    TS_ASSIGN_OR_RETURN(s->value, parse_expression(true));
    if (s->value->kind != ExprKind::kCall) return fail(s->offset, "expected call");
    TS_ASSIGN_OR_RETURN(s->macro->body, parse_function_body("endcall"));
    scan_special_names(*s->macro);
    return s;
  }

  // transformers' {% generation %}: a call block whose body renders unchanged.
  Result<StmtPtr> parse_generation() {
    auto s = make_stmt(StmtKind::kCallBlock, cur().offset);
    next();
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = "caller";
    s->macro->offset = s->offset;
    TS_ASSIGN_OR_RETURN(s->macro->body, parse_function_body("endgeneration"));
    scan_special_names(*s->macro);
    return s;
  }

  Result<StmtPtr> parse_filter_block() {
    auto s = make_stmt(StmtKind::kFilterBlock, cur().offset);
    next();
    TS_ASSIGN_OR_RETURN(s->filter, parse_filter(make(ExprKind::kBlockValue, s->offset), true));
    int saved = loop_depth_;
    auto body = parse_statements({"endfilter"}, true);
    loop_depth_ = saved;
    if (!body.ok()) return body.status();
    s->body = std::move(body).value();
    return s;
  }

  Result<StmtPtr> parse_with() {
    auto s = make_stmt(StmtKind::kWith, cur().offset);
    next();
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->assignments.empty()) TS_RETURN_IF_ERROR(expect_op(","));
      TS_ASSIGN_OR_RETURN(Target t, parse_assign_target(true, false, {}, false));
      TS_RETURN_IF_ERROR(expect_op("="));
      TS_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
      s->assignments.emplace_back(std::move(t), std::move(v));
    }
    TS_ASSIGN_OR_RETURN(s->body, parse_statements({"endwith"}, true));
    return s;
  }

  Result<StmtPtr> parse_print() {
    auto s = make_stmt(StmtKind::kOutput, cur().offset);
    next();
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->exprs.empty()) TS_RETURN_IF_ERROR(expect_op(","));
      TS_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(true));
      s->exprs.push_back(std::move(e));
    }
    return s;
  }

  Result<Target> to_target(const Expr& e) const {
    Target t;
    if (e.kind == ExprKind::kName) {
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" || e.name == "False" ||
          e.name == "None") {
        return fail(e.offset, "can't assign to 'const'");
      }
      t.kind = Target::Kind::kName;
      t.name = e.name;
      return t;
    }
    if (e.kind == ExprKind::kTuple) {
      t.kind = Target::Kind::kTuple;
      for (const ExprPtr& item : e.items) {
        TS_ASSIGN_OR_RETURN(Target sub, to_target(*item));
        t.items.push_back(std::move(sub));
      }
      return t;
    }
    return fail(e.offset, e.kind == ExprKind::kConst ? "can't assign to 'const'" : "can't assign to this expression");
  }

  Result<Target> parse_assign_target(bool with_tuple, bool name_only, const std::vector<std::string_view>& extra_end,
                                     bool with_namespace) {
    if (with_namespace && cur().type == TokenType::kName && look().type == TokenType::kOperator && look().text == ".") {
      Target t;
      t.kind = Target::Kind::kNamespaceAttr;
      t.name = cur().text;
      next();
      next();
      TS_ASSIGN_OR_RETURN(t.attr, expect_name());
      return t;
    }
    if (name_only) {
      Target t;
      TS_ASSIGN_OR_RETURN(t.name, expect_name());
      return t;
    }
    ExprPtr e;
    if (with_tuple) {
      TS_ASSIGN_OR_RETURN(e, parse_tuple(true, true, extra_end, false));
    } else {
      TS_ASSIGN_OR_RETURN(e, parse_primary());
    }
    return to_target(*e);
  }

  // ---- expressions ----

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    DepthGuard guard(depth_);
    TS_RETURN_IF_ERROR(check_depth());
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  Result<ExprPtr> parse_condexpr() {
    std::size_t offset = cur().offset;
    TS_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
    while (skip_name("if")) {
      auto e = make(ExprKind::kCondExpr, offset);
      TS_ASSIGN_OR_RETURN(e->b, parse_or());
      if (skip_name("else")) {
        TS_ASSIGN_OR_RETURN(e->c, parse_condexpr());
      }
      e->a = std::move(expr1);
      TS_RETURN_IF_ERROR(seal(*e));
      expr1 = std::move(e);
      offset = cur().offset;
    }
    return expr1;
  }

  Result<ExprPtr> parse_or() {
    TS_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
    while (is_name("or")) {
      auto e = make(ExprKind::kOr, cur().offset);
      next();
      TS_ASSIGN_OR_RETURN(e->b, parse_and());
      e->a = std::move(left);
      TS_RETURN_IF_ERROR(seal(*e));
      left = std::move(e);
    }
    return left;
  }

  Result<ExprPtr> parse_and() {
    TS_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
    while (is_name("and")) {
      auto e = make(ExprKind::kAnd, cur().offset);
      next();
      TS_ASSIGN_OR_RETURN(e->b, parse_not());
      e->a = std::move(left);
      TS_RETURN_IF_ERROR(seal(*e));
      left = std::move(e);
    }
    return left;
  }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      DepthGuard guard(depth_);
      TS_RETURN_IF_ERROR(check_depth());
      auto e = make(ExprKind::kNot, cur().offset);
      next();
      TS_ASSIGN_OR_RETURN(e->a, parse_not());
      TS_RETURN_IF_ERROR(seal(*e));
      return e;
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    std::size_t offset = cur().offset;
    TS_ASSIGN_OR_RETURN(ExprPtr expr, parse_math1());
    ExprPtr cmp;
    while (true) {
      CompareOp op;
      if (is_op("==")) {
        op = CompareOp::kEq;
      } else if (is_op("!=")) {
        op = CompareOp::kNe;
      } else if (is_op("<")) {
        op = CompareOp::kLt;
      } else if (is_op("<=")) {
        op = CompareOp::kLe;
      } else if (is_op(">")) {
        op = CompareOp::kGt;
      } else if (is_op(">=")) {
        op = CompareOp::kGe;
      } else if (is_name("in")) {
        op = CompareOp::kIn;
      } else if (is_name("not") && look().type == TokenType::kName && look().text == "in") {
        op = CompareOp::kNotIn;
        next();
      } else {
        break;
      }
      next();
      if (!cmp) {
        cmp = make(ExprKind::kCompare, offset);
        cmp->a = std::move(expr);
      }
      cmp->compare_ops.push_back(op);
      TS_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
      cmp->items.push_back(std::move(operand));
    }
    if (!cmp) return expr;
    TS_RETURN_IF_ERROR(seal(*cmp));
    return cmp;
  }

  Result<ExprPtr> binary(ExprPtr left, BinaryOp op, std::size_t offset, ExprPtr right) {
    auto e = make(ExprKind::kBinary, offset);
    e->binary_op = op;
    e->a = std::move(left);
    e->b = std::move(right);
    TS_RETURN_IF_ERROR(seal(*e));
    return e;
  }

  Result<ExprPtr> parse_math1() {
    TS_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
    while (is_op("+") || is_op("-")) {
      BinaryOp op = is_op("+") ? BinaryOp::kAdd : BinaryOp::kSub;
      std::size_t offset = cur().offset;
      next();
      TS_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
      TS_ASSIGN_OR_RETURN(left, binary(std::move(left), op, offset, std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parse_concat() {
    std::size_t offset = cur().offset;
    TS_ASSIGN_OR_RETURN(ExprPtr first, parse_math2());
    if (!is_op("~")) return first;
    auto e = make(ExprKind::kConcat, offset);
    e->items.push_back(std::move(first));
    while (skip_op("~")) {
      TS_ASSIGN_OR_RETURN(ExprPtr part, parse_math2());
      e->items.push_back(std::move(part));
    }
    TS_RETURN_IF_ERROR(seal(*e));
    return e;
  }

  Result<ExprPtr> parse_math2() {
    TS_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      BinaryOp op = is_op("*")    ? BinaryOp::kMul
                    : is_op("/")  ? BinaryOp::kDiv
                    : is_op("//") ? BinaryOp::kFloorDiv
                                  : BinaryOp::kMod;
      std::size_t offset = cur().offset;
      next();
      TS_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
      TS_ASSIGN_OR_RETURN(left, binary(std::move(left), op, offset, std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parse_pow() {
    TS_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
    while (is_op("**")) {
      std::size_t offset = cur().offset;
      next();
      TS_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
      TS_ASSIGN_OR_RETURN(left, binary(std::move(left), BinaryOp::kPow, offset, std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    DepthGuard guard(depth_);
    TS_RETURN_IF_ERROR(check_depth());
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().offset);
      next();
      TS_ASSIGN_OR_RETURN(node->a, parse_unary(false));
      TS_RETURN_IF_ERROR(seal(*node));
    } else {
      TS_ASSIGN_OR_RETURN(node, parse_primary());
    }
    TS_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (with_filter) {
      TS_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = cur();
    if (t.type == TokenType::kName) {
      ExprPtr e;
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        e = make(ExprKind::kConst, t.offset);
        e->value = Value::boolean(t.text == "true" || t.text == "True");
      } else if (t.text == "none" || t.text == "None") {
        e = make(ExprKind::kConst, t.offset);
        e->value = Value::none();
      } else {
        e = make(ExprKind::kName, t.offset);
        e->name = t.text;
      }
      next();
      return e;
    }
    if (t.type == TokenType::kString) {
      auto e = make(ExprKind::kConst, t.offset);
      std::string text;
      while (cur().type == TokenType::kString) {  // adjacent literals concatenate
        text += cur().text;
        next();
      }
      e->value = Value::string(std::move(text));
      return e;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      auto e = make(ExprKind::kConst, t.offset);
      e->value = t.type == TokenType::kInteger ? Value::integer(t.int_value) : Value::floating(t.float_value);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      TS_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(false, true, {}, true));
      TS_RETURN_IF_ERROR(expect_op(")"));
      return e;
    }
    if (is_op("[")) return parse_list();
    if (is_op("{")) return parse_dict();
    return fail("unexpected '" + describe(t) + "'");
  }

  bool is_tuple_end(const std::vector<std::string_view>& extra_end) const {
    if (cur().type == TokenType::kVariableEnd || cur().type == TokenType::kBlockEnd || is_op(")")) return true;
    if (cur().type == TokenType::kName) {
      for (std::string_view n : extra_end) {
        if (cur().text == n) return true;
      }
    }
    return false;
  }

  Result<ExprPtr> parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string_view>& extra_end,
                              bool explicit_parentheses) {
    std::size_t offset = cur().offset;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) TS_RETURN_IF_ERROR(expect_op(","));
      if (is_tuple_end(extra_end)) break;
      ExprPtr item;
      if (simplified) {
        TS_ASSIGN_OR_RETURN(item, parse_primary());
      } else {
        TS_ASSIGN_OR_RETURN(item, parse_expression(with_condexpr));
      }
      items.push_back(std::move(item));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) return fail("Expected an expression, got '" + describe(cur()) + "'");
    }
    auto e = make(ExprKind::kTuple, offset);
    e->items = std::move(items);
    TS_RETURN_IF_ERROR(seal(*e));
    return e;
  }

  Result<ExprPtr> parse_list() {
    auto e = make(ExprKind::kList, cur().offset);
    next();
    while (!is_op("]")) {
      if (!e->items.empty()) TS_RETURN_IF_ERROR(expect_op(","));
      if (is_op("]")) break;
      TS_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
      e->items.push_back(std::move(item));
    }
    TS_RETURN_IF_ERROR(expect_op("]"));
    TS_RETURN_IF_ERROR(seal(*e));
    return e;
  }

  Result<ExprPtr> parse_dict() {
    auto e = make(ExprKind::kDict, cur().offset);
    next();
    while (!is_op("}")) {
      if (!e->items.empty()) TS_RETURN_IF_ERROR(expect_op(","));
      if (is_op("}")) break;
      TS_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
      TS_RETURN_IF_ERROR(expect_op(":"));
      TS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e->items.push_back(std::move(key));
      e->items.push_back(std::move(value));
    }
    TS_RETURN_IF_ERROR(expect_op("}"));
    TS_RETURN_IF_ERROR(seal(*e));
    return e;
  }

  Result<ExprPtr> parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        TS_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
      } else if (is_op("(")) {
        TS_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        TS_ASSIGN_OR_RETURN(node, parse_filter(std::move(node), false));
      } else if (is_name("is")) {
        TS_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
      } else if (is_op("(")) {
        TS_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr node) {
    std::size_t offset = cur().offset;
    if (skip_op(".")) {
      const Token& attr = cur();
      if (attr.type == TokenType::kName) {
        auto e = make(ExprKind::kGetattr, offset);
        e->a = std::move(node);
        e->name = attr.text;
        next();
        TS_RETURN_IF_ERROR(seal(*e));
        return e;
      }
      if (attr.type != TokenType::kInteger) return fail("expected name or number");
      auto e = make(ExprKind::kGetitem, offset);
      e->a = std::move(node);
      e->b = make(ExprKind::kConst, attr.offset);
      e->b->value = Value::integer(attr.int_value);
      next();
      TS_RETURN_IF_ERROR(seal(*e));
      return e;
    }
    next();  // [
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) TS_RETURN_IF_ERROR(expect_op(","));
      TS_ASSIGN_OR_RETURN(ExprPtr arg, parse_subscribed());
      args.push_back(std::move(arg));
    }
    TS_RETURN_IF_ERROR(expect_op("]"));
    auto e = make(ExprKind::kGetitem, offset);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = make(ExprKind::kTuple, offset);
      e->b->items = std::move(args);
      TS_RETURN_IF_ERROR(seal(*e->b));
    }
    TS_RETURN_IF_ERROR(seal(*e));
    return e;
  }

  Result<ExprPtr> parse_subscribed() {
    std::size_t offset = cur().offset;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      TS_ASSIGN_OR_RETURN(ExprPtr node, parse_expression(true));
      if (!is_op(":")) return node;
      next();
      parts.push_back(std::move(node));
    }
    if (is_op(":")) {
      parts.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      TS_ASSIGN_OR_RETURN(ExprPtr stop, parse_expression(true));
      parts.push_back(std::move(stop));
    } else {
      parts.push_back(nullptr);
    }
    if (is_op(":")) {
      next();
      if (!is_op("]") && !is_op(",")) {
        TS_ASSIGN_OR_RETURN(ExprPtr step, parse_expression(true));
        parts.push_back(std::move(step));
      } else {
        parts.push_back(nullptr);
      }
    } else {
      parts.push_back(nullptr);
    }
    auto e = make(ExprKind::kSlice, offset);
    e->items = std::move(parts);
    TS_RETURN_IF_ERROR(seal(*e));
    return e;
  }

  Result<CallArgs> parse_call_args() {
    std::size_t open = cur().offset;
    TS_RETURN_IF_ERROR(expect_op("("));
    CallArgs args;
    bool require_comma = false;
    auto ensure = [&](bool ok) { return ok ? Status() : fail(open, "invalid syntax for function call expression"); };
    while (!is_op(")")) {
      if (require_comma) {
        TS_RETURN_IF_ERROR(expect_op(","));
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        TS_RETURN_IF_ERROR(ensure(!args.star_args && !args.star_kwargs));
        next();
        TS_ASSIGN_OR_RETURN(args.star_args, parse_expression(true));
      } else if (is_op("**")) {
        TS_RETURN_IF_ERROR(ensure(!args.star_kwargs));
        next();
        TS_ASSIGN_OR_RETURN(args.star_kwargs, parse_expression(true));
      } else if (cur().type == TokenType::kName && look().type == TokenType::kOperator && look().text == "=") {
        TS_RETURN_IF_ERROR(ensure(!args.star_kwargs));
        std::string key = cur().text;
        next();
        next();
        TS_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        args.keyword.emplace_back(std::move(key), std::move(v));
      } else {
        TS_RETURN_IF_ERROR(ensure(!args.star_args && !args.star_kwargs && args.keyword.empty()));
        TS_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        args.positional.push_back(std::move(v));
      }
      require_comma = true;
    }
    TS_RETURN_IF_ERROR(expect_op(")"));
    return args;
  }

  Result<ExprPtr> parse_call(ExprPtr node) {
    auto e = make(ExprKind::kCall, cur().offset);
    e->a = std::move(node);
    TS_ASSIGN_OR_RETURN(e->args, parse_call_args());
    TS_RETURN_IF_ERROR(seal(*e));
    return e;
  }

  Result<std::string> parse_dotted_name() {
    TS_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_op(".")) {
      TS_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    return name;
  }

  Result<ExprPtr> parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto e = make(ExprKind::kFilter, cur().offset);
      TS_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
      if (filter_support(e->name) == Support::kUnsupported) {
        return Status::unsupported("filter '" + e->name + "' is not supported (at " +
                                   describe_position(source_, e->offset) + ")");
      }
      if (is_op("(")) {
        TS_ASSIGN_OR_RETURN(e->args, parse_call_args());
      }
      e->a = std::move(node);
      TS_RETURN_IF_ERROR(seal(*e));
      node = std::move(e);
    }
    return node;
  }

  Result<ExprPtr> parse_test(ExprPtr node) {
    std::size_t offset = cur().offset;
    next();  // is
    bool negated = skip_name("not");
    auto e = make(ExprKind::kTest, offset);
    TS_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
    if (test_support(e->name) == Support::kUnsupported) {
      return Status::unsupported("test '" + e->name + "' is not supported (at " + describe_position(source_, offset) +
                                 ")");
    }
    const Token& t = cur();
    if (is_op("(")) {
      TS_ASSIGN_OR_RETURN(e->args, parse_call_args());
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
                t.type == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) return fail("You cannot chain multiple tests with is");
      TS_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
      TS_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
      e->args.positional.push_back(std::move(arg));
    }
    e->a = std::move(node);
    TS_RETURN_IF_ERROR(seal(*e));
    if (!negated) return e;
    auto n = make(ExprKind::kNot, offset);
    n->a = std::move(e);
    TS_RETURN_IF_ERROR(seal(*n));
    return n;
  }

  // ---- passes over the finished tree ----

  static void for_each_expr(const Expr* e, const std::function<void(const Expr&)>& fn) {
    if (!e) return;
    fn(*e);
    for (const ExprPtr& item : e->items) for_each_expr(item.get(), fn);
    for_each_expr(e->a.get(), fn);
    for_each_expr(e->b.get(), fn);
    for_each_expr(e->c.get(), fn);
    for (const ExprPtr& arg : e->args.positional) for_each_expr(arg.get(), fn);
    for (const auto& kw : e->args.keyword) for_each_expr(kw.second.get(), fn);
    for_each_expr(e->args.star_args.get(), fn);
    for_each_expr(e->args.star_kwargs.get(), fn);
  }

  static void for_each_expr(const Body& body, const std::function<void(const Expr&)>& fn) {
    for (const StmtPtr& s : body) {
      for (const ExprPtr& e : s->exprs) for_each_expr(e.get(), fn);
      for (const auto& [test, branch] : s->branches) {
        for_each_expr(test.get(), fn);
        for_each_expr(branch, fn);
      }
      for_each_expr(s->body, fn);
      for_each_expr(s->else_body, fn);
      for_each_expr(s->value.get(), fn);
      for_each_expr(s->filter.get(), fn);
      for (const auto& a : s->assignments) for_each_expr(a.second.get(), fn);
      if (s->macro) {
        for (const ExprPtr& d : s->macro->defaults) for_each_expr(d.get(), fn);
        for_each_expr(s->macro->body, fn);
      }
    }
  }

  // jinja2 passes caller / varargs / kwargs only to macros whose body names them.
  static void scan_special_names(MacroDef& m) {
    auto is_param = [&](std::string_view n) {
      return std::find(m.params.begin(), m.params.end(), n) != m.params.end();
    };
    for_each_expr(m.body, [&](const Expr& e) {
      if (e.kind != ExprKind::kName) return;
      if (e.name == "caller" && !is_param("caller")) m.uses_caller = true;
      if (e.name == "varargs" && !is_param("varargs")) m.uses_varargs = true;
      if (e.name == "kwargs" && !is_param("kwargs")) m.uses_kwargs = true;
    });
  }

  // jinja2 refuses a filter or test it does not know when compiling, except inside
  // an {% if %} or inline if of the same scope (it fails only if reached there).
  Status check_expr(const Expr* e, bool soft) const {
    if (!e) return Status();
    if (e->kind == ExprKind::kCondExpr) soft = true;
    if ((e->kind == ExprKind::kFilter && filter_support(e->name) == Support::kUnknown) ||
        (e->kind == ExprKind::kTest && test_support(e->name) == Support::kUnknown)) {
      if (!soft) {
        return Status::invalid_input("template error at " + describe_position(source_, e->offset) + ": No " +
                                     (e->kind == ExprKind::kFilter ? "filter" : "test") + " named '" + e->name + "'.");
      }
    }
    for (const ExprPtr& item : e->items) TS_RETURN_IF_ERROR(check_expr(item.get(), soft));
    TS_RETURN_IF_ERROR(check_expr(e->a.get(), soft));
    TS_RETURN_IF_ERROR(check_expr(e->b.get(), soft));
    TS_RETURN_IF_ERROR(check_expr(e->c.get(), soft));
    for (const ExprPtr& arg : e->args.positional) TS_RETURN_IF_ERROR(check_expr(arg.get(), soft));
    for (const auto& kw : e->args.keyword) TS_RETURN_IF_ERROR(check_expr(kw.second.get(), soft));
    TS_RETURN_IF_ERROR(check_expr(e->args.star_args.get(), soft));
    return check_expr(e->args.star_kwargs.get(), soft);
  }

  Status check_filters(const Body& body, bool soft) const {
    for (const StmtPtr& s : body) {
      switch (s->kind) {
        case StmtKind::kIf:
          for (const auto& [test, branch] : s->branches) {
            TS_RETURN_IF_ERROR(check_expr(test.get(), true));
            TS_RETURN_IF_ERROR(check_filters(branch, true));
          }
          TS_RETURN_IF_ERROR(check_filters(s->else_body, true));
          break;
        case StmtKind::kFor:
          TS_RETURN_IF_ERROR(check_expr(s->value.get(), soft));
          TS_RETURN_IF_ERROR(check_expr(s->filter.get(), false));
          TS_RETURN_IF_ERROR(check_filters(s->body, false));
          TS_RETURN_IF_ERROR(check_filters(s->else_body, soft));
          break;
        case StmtKind::kMacro:
        case StmtKind::kCallBlock:
          for (const ExprPtr& d : s->macro->defaults) TS_RETURN_IF_ERROR(check_expr(d.get(), false));
          TS_RETURN_IF_ERROR(check_filters(s->macro->body, false));
          TS_RETURN_IF_ERROR(check_expr(s->value.get(), soft));
          break;
        case StmtKind::kSetBlock:
        case StmtKind::kFilterBlock:
        case StmtKind::kWith:
          TS_RETURN_IF_ERROR(check_expr(s->filter.get(), false));
          for (const auto& a : s->assignments) TS_RETURN_IF_ERROR(check_expr(a.second.get(), soft));
          TS_RETURN_IF_ERROR(check_filters(s->body, false));
          break;
        default:
          for (const ExprPtr& e : s->exprs) TS_RETURN_IF_ERROR(check_expr(e.get(), soft));
          TS_RETURN_IF_ERROR(check_expr(s->value.get(), soft));
          break;
      }
    }
    return Status();
  }

  std::string source_;
  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<std::shared_ptr<const Program>> parse_program(std::string_view source) {
  TS_ASSIGN_OR_RETURN(LexedTemplate lexed, lex(source));
  Parser parser(std::move(lexed));
  return parser.run();
}

}  // namespace tessera::tmpl
