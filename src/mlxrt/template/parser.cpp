#include "mlxrt/template/parser.h"

#include <cerrno>
#include <cstdlib>
#include <set>

namespace mlxrt::tmpl::detail {

namespace {

constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().type != Tok::kEnd) fail("unexpected token");
    // jinja2 rejects unknown filters/tests when compiling, except inside `if` statements and
    // inline ifs ("soft" frames), where they fail only if they run.
    for (const auto& u : unknown_)
      if (!u.soft) throw SyntaxFailure{u.message, u.line, u.column};
    return body;
  }

 private:
  struct Unknown {
    std::string message;
    int line;
    int column;
    bool soft;
  };
  /** Runs `fn` with soft_ set to `soft`, restoring it afterwards. */
  template <typename F>
  decltype(auto) with_soft(bool soft, F fn) {
    bool saved = soft_;
    soft_ = soft;
    struct Restore {
      bool& flag;
      bool value;
      ~Restore() { flag = value; }
    } restore{soft_, saved};
    return fn();
  }
  void note_unknown(const std::string& what, const std::string& name, const Token& t) {
    unknown_.push_back({"No " + what + " named '" + name + "'.", t.line, t.column, soft_});
  }

  // --- token helpers -----------------------------------------------------------------------
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(std::size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail("expected a name, got " + describe(cur()));
    std::string n = cur().value;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
    advance();
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kEnd: return "end of template";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kVarEnd: return "end of print statement";
      case Tok::kString: return "string";
      case Tok::kInt:
      case Tok::kFloat: return "number " + t.value;
      default: return "'" + t.value + "'";
    }
  }
  [[noreturn]] void fail(const std::string& msg) const { throw SyntaxFailure{msg, cur().line, cur().column}; }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail("template nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  ExprPtr node(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // --- statements --------------------------------------------------------------------------
  /** Parses until a block tag whose keyword is in `ends` (left unconsumed, after `{%`). */
  Body parse_body(const std::set<std::string>& ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::kEnd) {
        if (!ends.empty()) fail("unexpected end of template, expected '" + *ends.begin() + "'");
        return body;
      }
      if (t.type == Tok::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = t.value;
        s->line = t.line;
        s->column = t.column;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == Tok::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        s->column = t.column;
        advance();
        s->expr = parse_tuple(true, false);
        if (cur().type != Tok::kVarEnd) fail("expected end of print statement, got " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        const Token& kw = peek();
        if (kw.type == Tok::kName && ends.count(kw.value)) {
          advance();
          return body;
        }
        advance();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr make_stmt(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  StmtPtr parse_statement() {
    const Token at = cur();
    if (at.type != Tok::kName) fail("expected a statement keyword, got " + describe(at));
    const std::string& kw = at.value;
    advance();
    if (kw == "if") return parse_if(at);
    if (kw == "for") return parse_for(at);
    if (kw == "set") return parse_set(at);
    if (kw == "macro") return parse_macro(at);
    if (kw == "call") return parse_call_block(at);
    if (kw == "filter") return parse_filter_block(at);
    if (kw == "with") return parse_with(at);
    if (kw == "generation") {
      // transformers' {% generation %} marks assistant text; rendering it is the body itself.
      auto s = make_stmt(Stmt::Kind::kScope, at);
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      advance();
      expect_block_end();
      return s;
    }
    if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) throw SyntaxFailure{"'" + kw + "' outside of a loop", at.line, at.column};
      auto s = make_stmt(kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, at);
      expect_block_end();
      return s;
    }
    throw SyntaxFailure{"Encountered unknown tag '" + kw + "'", at.line, at.column};
  }

  StmtPtr parse_if(const Token& at) {
    return with_soft(true, [&] { return parse_if_body(at); });
  }

  StmtPtr parse_if_body(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kIf, at);
    ExprPtr cond = parse_tuple(false, false);
    while (true) {
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      std::string which = cur().value;
      advance();
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (which == "elif") {
        cond = parse_tuple(false, false);
        continue;
      }
      if (which == "else") {
        expect_block_end();
        Body else_body = parse_body({"endif"});
        advance();
        s->branches.emplace_back(nullptr, std::move(else_body));
      }
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kFor, at);
    s->target = parse_assign_target(false);
    if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, false);
    if (skip_name("if")) s->condition = parse_expression(true);
    if (skip_name("recursive")) fail("recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = with_soft(false, [&] { return parse_body({"endfor", "else"}); });
    --loop_depth_;
    std::string which = cur().value;
    advance();
    if (which == "else") {
      expect_block_end();
      int saved = loop_depth_;
      loop_depth_ = 0;  // break/continue in for-else belong to an outer loop; jinja2 rejects them
      s->else_body = with_soft(false, [&] { return parse_body({"endfor"}); });
      loop_depth_ = saved;
      advance();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(const Token& at) {
    ExprPtr target = parse_assign_target(true);
    if (skip_op("=")) {
      auto s = make_stmt(Stmt::Kind::kSet, at);
      s->target = std::move(target);
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    auto s = make_stmt(Stmt::Kind::kSetBlock, at);
    if (target->kind != Expr::Kind::kName && target->kind != Expr::Kind::kAttr) fail("block set needs one name");
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = with_soft(false, [&] { return parse_body({"endset"}); });
    advance();
    expect_block_end();
    return s;
  }

  ExprPtr parse_assign_target(bool allow_attr) {
    const Token at = cur();
    auto single = [&]() -> ExprPtr {
      const Token t = cur();
      std::string n = expect_name();
      if (allow_attr && skip_op(".")) {
        auto a = node(Expr::Kind::kAttr, t);
        auto obj = node(Expr::Kind::kName, t);
        obj->name = n;
        a->args.push_back(std::move(obj));
        a->name = expect_name();
        return a;
      }
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        throw SyntaxFailure{"cannot assign to '" + n + "'", t.line, t.column};
      auto e = node(Expr::Kind::kName, t);
      e->name = n;
      return e;
    };
    bool paren = skip_op("(");
    ExprPtr first = single();
    if (!is_op(",")) {
      if (paren) expect_op(")");
      return first;
    }
    auto tup = node(Expr::Kind::kTuple, at);
    tup->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type != Tok::kName) break;
      tup->args.push_back(single());
    }
    if (paren) expect_op(")");
    return tup;
  }

  std::shared_ptr<MacroDef> parse_signature(std::string name) {
    auto m = std::make_shared<MacroDef>();
    m->name = std::move(name);
    expect_op("(");
    while (!is_op(")")) {
      if (!m->params.empty()) expect_op(",");
      if (is_op(")")) break;
      m->params.push_back(expect_name());
      m->defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    expect_op(")");
    return m;
  }

  StmtPtr parse_macro(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kMacro, at);
    s->macro = parse_signature(expect_name());
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->macro->body = with_soft(false, [&] { return parse_body({"endmacro"}); });
    loop_depth_ = saved;
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kCallBlock, at);
    if (is_op("(")) s->macro = parse_signature("caller");
    else s->macro = std::make_shared<MacroDef>(), s->macro->name = "caller";
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::kCall) throw SyntaxFailure{"expected call", at.line, at.column};
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->macro->body = with_soft(false, [&] { return parse_body({"endcall"}); });
    loop_depth_ = saved;
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kFilterBlock, at);
    s->expr = parse_filter_chain(nullptr, /*first_without_bar=*/true);
    expect_block_end();
    s->body = with_soft(false, [&] { return parse_body({"endfilter"}); });
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kWith, at);
    while (cur().type != Tok::kBlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      ExprPtr target = parse_assign_target(false);
      expect_op("=");
      s->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    s->body = with_soft(false, [&] { return parse_body({"endwith"}); });
    advance();
    expect_block_end();
    return s;
  }

  // --- expressions -------------------------------------------------------------------------
  /** Tuples without parentheses (`a, b`), as jinja2's parse_tuple. */
  ExprPtr parse_tuple(bool with_condexpr, bool simplified) {
    const Token at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        is_tuple = true;
      }
      if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")") ||
          (cur().type == Tok::kName && (cur().value == "if" || cur().value == "in") && !items.empty()))
        break;
      items.push_back(simplified ? parse_primary_postfix() : parse_expression(with_condexpr));
    }
    if (!is_tuple) {
      if (items.empty()) fail("expected an expression, got " + describe(cur()));
      return std::move(items[0]);
    }
    auto t = node(Expr::Kind::kTuple, at);
    t->args = std::move(items);
    return t;
  }

  ExprPtr parse_primary_postfix() {
    ExprPtr e = parse_primary();
    return parse_postfix(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const Token at = cur();
    std::size_t mark = unknown_.size();
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      for (std::size_t i = mark; i < unknown_.size(); ++i) unknown_[i].soft = true;
      auto c = node(Expr::Kind::kCond, at);
      ExprPtr cond = with_soft(true, [&] { return parse_or(); });
      ExprPtr other = skip_name("else") ? with_soft(true, [&] { return parse_condexpr(); }) : nullptr;
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(Expr::Kind kind, const Token& at, ExprPtr l, ExprPtr r, std::string op = {}) {
    auto b = node(kind, at);
    b->name = std::move(op);
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    const Token at = cur();
    ExprPtr e = parse_and();
    while (skip_name("or")) e = binary(Expr::Kind::kOr, at, std::move(e), parse_and());
    return e;
  }

  ExprPtr parse_and() {
    const Token at = cur();
    ExprPtr e = parse_not();
    while (skip_name("and")) e = binary(Expr::Kind::kAnd, at, std::move(e), parse_not());
    return e;
  }

  ExprPtr parse_not() {
    const Token at = cur();
    if (skip_name("not")) {
      DepthGuard guard(*this);
      auto n = node(Expr::Kind::kNot, at);
      n->args.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == ">" ||
           cur().value == "<=" || cur().value == ">=")) {
        op = cur().value;
        advance();
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == Tok::kName && peek().value == "in") {
        advance();
        advance();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::Kind::kCompare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    const Token at = cur();
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().value;
      advance();
      e = binary(Expr::Kind::kBinary, at, std::move(e), parse_concat(), op);
    }
    return e;
  }

  ExprPtr parse_concat() {
    const Token at = cur();
    ExprPtr e = parse_math2();
    if (!is_op("~")) return e;
    auto c = node(Expr::Kind::kConcat, at);
    c->args.push_back(std::move(e));
    while (skip_op("~")) c->args.push_back(parse_math2());
    return c;
  }

  ExprPtr parse_math2() {
    const Token at = cur();
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().value;
      advance();
      e = binary(Expr::Kind::kBinary, at, std::move(e), parse_pow(), op);
    }
    return e;
  }

  ExprPtr parse_pow() {
    const Token at = cur();
    ExprPtr e = parse_unary(true);
    while (skip_op("**")) e = binary(Expr::Kind::kBinary, at, std::move(e), parse_unary(true), "**");
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const Token at = cur();
    ExprPtr e;
    if (skip_op("-")) {
      e = node(Expr::Kind::kNeg, at);
      e->args.push_back(parse_unary(false));
    } else if (skip_op("+")) {
      e = node(Expr::Kind::kPos, at);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary_postfix();
    }
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token t = cur();
    switch (t.type) {
      case Tok::kName: {
        advance();
        auto e = node(Expr::Kind::kConst, t);
        if (t.value == "true" || t.value == "True") e->constant = Value(true);
        else if (t.value == "false" || t.value == "False") e->constant = Value(false);
        else if (t.value == "none" || t.value == "None") e->constant = Value::none();
        else e->kind = Expr::Kind::kName, e->name = t.value;
        return e;
      }
      case Tok::kString: {
        std::string s;
        while (cur().type == Tok::kString) {
          s += cur().value;
          advance();
        }
        auto e = node(Expr::Kind::kConst, t);
        e->constant = Value(std::move(s));
        return e;
      }
      case Tok::kInt: {
        advance();
        auto e = node(Expr::Kind::kConst, t);
        errno = 0;
        long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) throw SyntaxFailure{"integer literal too large", t.line, t.column};
        e->constant = Value(static_cast<std::int64_t>(v));
        return e;
      }
      case Tok::kFloat: {
        advance();
        auto e = node(Expr::Kind::kConst, t);
        e->constant = Value(std::strtod(t.value.c_str(), nullptr));
        return e;
      }
      case Tok::kOp:
        if (t.value == "(") {
          advance();
          if (skip_op(")")) {
            auto e = node(Expr::Kind::kTuple, t);
            return e;
          }
          ExprPtr e = parse_tuple(true, false);
          expect_op(")");
          return e;
        }
        if (t.value == "[") {
          advance();
          auto e = node(Expr::Kind::kList, t);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.value == "{") {
          advance();
          auto e = node(Expr::Kind::kDict, t);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token t = cur();
      if (is_op(".")) {
        advance();
        auto a = node(Expr::Kind::kAttr, t);
        if (cur().type == Tok::kName) {
          a->name = cur().value;
          advance();
        } else if (cur().type == Tok::kInt) {
          a->kind = Expr::Kind::kItem;
          auto idx = node(Expr::Kind::kConst, cur());
          idx->constant = Value(static_cast<std::int64_t>(std::strtoll(cur().value.c_str(), nullptr, 10)));
          advance();
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(idx));
          e = std::move(a);
          continue;
        } else {
          fail("expected an attribute name, got " + describe(cur()));
        }
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        advance();
        auto item = node(Expr::Kind::kItem, t);
        item->args.push_back(std::move(e));
        std::vector<ExprPtr> subs;
        while (!is_op("]")) {
          if (!subs.empty()) expect_op(",");
          subs.push_back(parse_subscript());
        }
        expect_op("]");
        if (subs.empty()) fail("expected a subscript");
        if (subs.size() == 1) {
          item->args.push_back(std::move(subs[0]));
        } else {
          auto tup = node(Expr::Kind::kTuple, t);
          tup->args = std::move(subs);
          item->args.push_back(std::move(tup));
        }
        e = std::move(item);
      } else if (is_op("(")) {
        auto call = node(Expr::Kind::kCall, t);
        call->args.push_back(std::move(e));
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript() {
    const Token t = cur();
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    auto s = node(Expr::Kind::kSlice, t);
    advance();  // ':'
    ExprPtr stop, step;
    if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
    if (skip_op(":"))
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    s->args.push_back(std::move(start));
    s->args.push_back(std::move(stop));
    s->args.push_back(std::move(step));
    return s;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (skip_op("**")) {
        call.star_kwargs = parse_expression(true);
      } else if (skip_op("*")) {
        call.star_args = parse_expression(true);
      } else if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        call.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!call.kwargs.empty() || call.star_kwargs) fail("positional argument after keyword argument");
        call.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  std::string parse_dotted_name() {
    std::string n = expect_name();
    while (skip_op(".")) n += "." + expect_name();
    return n;
  }

  ExprPtr parse_filter_chain(ExprPtr subject, bool first_without_bar = false) {
    bool first = true;
    while (is_op("|") || (first && first_without_bar)) {
      if (!(first && first_without_bar)) advance();
      first = false;
      const Token t = cur();
      std::string name = parse_dotted_name();
      if (!is_known_filter(name)) note_unknown("filter", name, t);
      auto f = node(Expr::Kind::kFilter, t);
      f->name = name;
      f->args.push_back(std::move(subject));
      if (is_op("(")) parse_call_args(*f);
      subject = std::move(f);
    }
    return subject;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e));
      } else if (is_name("is")) {
        const Token at = cur();
        advance();
        bool negated = skip_name("not");
        const Token t = cur();
        std::string name = parse_dotted_name();
        if (!is_known_test(name)) note_unknown("test", name, t);
        auto test = node(Expr::Kind::kTest, at);
        test->name = name;
        test->negated = negated;
        test->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*test);
        } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                    cur().type == Tok::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
                   !(is_name("else") || is_name("or") || is_name("and"))) {
          if (is_name("is")) fail("You cannot chain multiple tests with is");
          test->args.push_back(parse_primary_postfix());
        }
        e = std::move(test);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& toks_;
  std::vector<Unknown> unknown_;
  bool soft_ = false;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_tokens(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace mlxrt::tmpl::detail
