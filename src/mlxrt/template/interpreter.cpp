#include "mlxrt/template/interpreter.h"

#include <algorithm>

#include "mlxrt/template/text.h"

namespace mlxrt::tmpl::detail {

namespace {

std::string unsafe_name(const std::string& name) { return !name.empty() && name[0] == '_' ? name : ""; }

}  // namespace

Interpreter::Interpreter(const Program& program, const RenderLimits& limits, Value context)
    : program_(program), limits_(limits), context_(std::move(context)) {}

std::string Interpreter::render() {
  exec_body(program_.body);
  return std::move(output_);
}

void Interpreter::write(std::string_view s) {
  if (sink_->size() + s.size() > limits_.max_output_bytes)
    throw OpError("output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  sink_->append(s);
}

void Interpreter::tick(std::size_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations)
    throw OpError("loop iterations exceed the limit of " + std::to_string(limits_.max_loop_iterations));
}

// --- variables -------------------------------------------------------------------------------

Value Interpreter::lookup(const std::string& name) const {
  for (auto f = stack_.rbegin(); f != stack_.rend(); ++f)
    for (auto it = f->rbegin(); it != f->rend(); ++it)
      if (it->first == name) return it->second;
  for (const auto& [k, v] : root_)
    if (k == name) return v;
  if (const Value* v = context_.dict().find(name)) return *v;
  if (auto g = builtin_global(name)) return *g;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::set_var(const std::string& name, Value value) {
  Frame& f = stack_.empty() ? root_ : stack_.back();
  for (auto& [k, v] : f)
    if (k == name) {
      v = std::move(value);
      return;
    }
  f.emplace_back(name, std::move(value));
}

// --- statements ------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  try {
    switch (s.kind) {
      case Stmt::Kind::kText: write(s.text); return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        Value v = eval(*s.expr);
        if (v.is_string()) write(v.str());
        else write(to_str(v));
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf: {
        Flow f = Flow::kNormal;
        exec_if(s, f);
        return f;
      }
      case Stmt::Kind::kFor: return exec_for(s);
      case Stmt::Kind::kSet: exec_set(s); return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        Value v(capture(s.body));
        if (s.expr) {
          CallArgs none;
          // The filter chain's innermost subject is the captured text.
          std::vector<const Expr*> chain;
          for (const Expr* e = s.expr.get(); e; e = e->args[0].get()) chain.push_back(e);
          for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
            CallArgs args;
            eval_args(**it, 1, args);
            v = apply_filter((*it)->name, v, args);
          }
        }
        assign(*s.target, v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: exec_macro(s); return Flow::kNormal;
      case Stmt::Kind::kCallBlock: exec_call_block(s); return Flow::kNormal;
      case Stmt::Kind::kFilterBlock: {
        Value v(capture(s.body));
        std::vector<const Expr*> chain;
        for (const Expr* e = s.expr.get(); e; e = e->args[0].get()) chain.push_back(e);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args;
          eval_args(**it, 1, args);
          v = apply_filter((*it)->name, v, args);
        }
        write(to_str(v));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kWith: {
        Frame f;
        for (const auto& [target, value] : s.assignments) f.emplace_back(target->name, eval(*value));
        stack_.push_back(std::move(f));
        Flow fl = exec_body(s.body);
        stack_.pop_back();
        return fl;
      }
      case Stmt::Kind::kScope: return exec_body(s.body);
    }
  } catch (const OpError& e) {
    throw TemplateRenderError(e.what(), program_.name, s.line, s.column);
  } catch (const RaisedByTemplate& e) {
    throw TemplateRaised(e.message, program_.name, s.line, s.column);
  }
  return Flow::kNormal;
}

void Interpreter::exec_if(const Stmt& s, Flow& flow) {
  for (const auto& [cond, body] : s.branches) {
    if (!cond || truthy(eval(*cond))) {
      flow = exec_body(body);
      return;
    }
  }
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s) {
  Value iterable = eval(*s.expr);
  std::vector<Value> items = iterate(iterable);
  tick(items.size() / 16);
  if (s.condition) {
    std::vector<Value> kept;
    for (auto& item : items) {
      tick();
      stack_.emplace_back();
      assign(*s.target, item);
      bool keep = truthy(eval(*s.condition));
      stack_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body);
    return Flow::kNormal;
  }
  const auto n = static_cast<std::int64_t>(items.size());
  auto shared_items = std::make_shared<std::vector<Value>>(items);
  for (std::int64_t i = 0; i < n; ++i) {
    tick();
    std::vector<std::pair<Value, Value>> loop;
    loop.emplace_back(Value("index"), Value(i + 1));
    loop.emplace_back(Value("index0"), Value(i));
    loop.emplace_back(Value("revindex"), Value(n - i));
    loop.emplace_back(Value("revindex0"), Value(n - i - 1));
    loop.emplace_back(Value("first"), Value(i == 0));
    loop.emplace_back(Value("last"), Value(i == n - 1));
    loop.emplace_back(Value("length"), Value(n));
    loop.emplace_back(Value("depth"), Value(1));
    loop.emplace_back(Value("depth0"), Value(0));
    loop.emplace_back(Value("previtem"), i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop.emplace_back(Value("nextitem"), i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    loop.emplace_back(Value("cycle"), make_callable("cycle", [i](Interpreter&, CallArgs& a) -> Value {
                        if (a.positional.empty()) throw OpError("no items for cycling given");
                        return a.positional[static_cast<std::size_t>(i) % a.positional.size()];
                      }));
    stack_.emplace_back();
    stack_.back().emplace_back("loop", make_dict(std::move(loop)));
    assign(*s.target, items[i]);
    Flow f = exec_body(s.body);
    stack_.pop_back();
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Expr& target, const Value& value) {
  if (target.kind == Expr::Kind::kName) {
    set_var(target.name, value);
    return;
  }
  if (target.kind == Expr::Kind::kAttr) {
    Value obj = lookup(target.args[0]->name);
    if (!obj.is_namespace()) throw OpError("cannot assign attribute on non-namespace object");
    if (!unsafe_name(target.name).empty())
      throw OpError("Chat templates cannot store underscore-prefixed attributes on a namespace");
    std::get<NamespacePtr>(obj.v)->set(target.name, value);
    return;
  }
  // Tuple unpacking.
  std::vector<Value> items = iterate(value);
  if (items.size() != target.args.size())
    throw OpError(items.size() > target.args.size() ? "too many values to unpack (expected " +
                                                          std::to_string(target.args.size()) + ")"
                                                    : "not enough values to unpack (expected " +
                                                          std::to_string(target.args.size()) + ", got " +
                                                          std::to_string(items.size()) + ")");
  for (std::size_t i = 0; i < items.size(); ++i) assign(*target.args[i], items[i]);
}

void Interpreter::exec_set(const Stmt& s) { assign(*s.target, eval(*s.expr)); }

std::string Interpreter::capture(const Body& body) {
  std::string buf;
  std::string* saved = sink_;
  sink_ = &buf;
  try {
    exec_body(body);
  } catch (...) {
    sink_ = saved;
    throw;
  }
  sink_ = saved;
  return buf;
}

Value Interpreter::make_macro(std::shared_ptr<MacroDef> macro) {
  std::vector<Frame> closure = stack_;
  return make_callable(macro->name, [macro, closure = std::move(closure)](Interpreter& in, CallArgs& args) -> Value {
    if (in.call_depth_ >= in.limits_.max_call_depth)
      throw OpError("macro calls nested deeper than " + std::to_string(in.limits_.max_call_depth));
    Frame frame;
    std::vector<Value> varargs;
    for (std::size_t i = 0; i < args.positional.size(); ++i) {
      if (i < macro->params.size()) frame.emplace_back(macro->params[i], args.positional[i]);
      else varargs.push_back(args.positional[i]);
    }
    std::vector<std::pair<Value, Value>> extra;
    for (auto& [k, v] : args.keyword) {
      auto it = std::find(macro->params.begin(), macro->params.end(), k);
      if (it == macro->params.end()) {
        if (k == "caller") frame.emplace_back("caller", v);
        else extra.emplace_back(Value(k), v);
      } else if (static_cast<std::size_t>(it - macro->params.begin()) < args.positional.size()) {
        throw OpError("macro '" + macro->name + "' got multiple values for argument '" + k + "'");
      } else {
        frame.emplace_back(k, v);
      }
    }
    std::vector<Frame> saved = std::move(in.stack_);
    in.stack_ = closure;
    in.stack_.push_back(std::move(frame));
    ++in.call_depth_;
    std::string out;
    try {
      Frame& f = in.stack_.back();
      for (std::size_t i = 0; i < macro->params.size(); ++i) {
        const auto& p = macro->params[i];
        bool bound = std::any_of(f.begin(), f.end(), [&](const auto& kv) { return kv.first == p; });
        if (bound) continue;
        Value dv = macro->defaults[i] ? in.eval(*macro->defaults[i])
                                      : Value::undefined("parameter '" + p + "' was not provided");
        in.stack_.back().emplace_back(p, std::move(dv));
      }
      in.stack_.back().emplace_back("varargs", make_list(std::move(varargs), true));
      in.stack_.back().emplace_back("kwargs", make_dict(std::move(extra)));
      out = in.capture(macro->body);
    } catch (...) {
      in.stack_ = std::move(saved);
      --in.call_depth_;
      throw;
    }
    in.stack_ = std::move(saved);
    --in.call_depth_;
    return Value(std::move(out));
  });
}

void Interpreter::exec_macro(const Stmt& s) { set_var(s.macro->name, make_macro(s.macro)); }

void Interpreter::exec_call_block(const Stmt& s) {
  const Expr& call = *s.expr;
  Value callee = eval(*call.args[0]);
  CallArgs args;
  eval_args(call, 1, args);
  args.keyword.emplace_back("caller", make_macro(s.macro));
  Value v = this->call(callee, args);
  write(to_str(v));
}

// --- expressions -----------------------------------------------------------------------------

Value Interpreter::eval(const Expr& e) {
  try {
    return eval_inner(e);
  } catch (const OpError& err) {
    throw TemplateRenderError(err.what(), program_.name, e.line, e.column);
  } catch (const RaisedByTemplate& r) {
    throw TemplateRaised(r.message, program_.name, e.line, e.column);
  }
}

void Interpreter::eval_args(const Expr& e, std::size_t first, CallArgs& args) {
  for (std::size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  if (e.star_args) {
    for (auto& v : iterate(eval(*e.star_args))) args.positional.push_back(v);
  }
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
  if (e.star_kwargs) {
    Value d = eval(*e.star_kwargs);
    if (!d.is_dict()) throw OpError("argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict().items) args.keyword.emplace_back(to_str(k), v);
  }
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kConst: return e.constant;
    case Expr::Kind::kName: return lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a));
      return make_list(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      std::vector<std::pair<Value, Value>> items;
      for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        if (k.is_list() && !k.list().is_tuple) throw OpError("unhashable type: 'list'");
        if (k.is_dict()) throw OpError("unhashable type: 'dict'");
        dict_set(items, std::move(k), eval(*e.args[i + 1]));
      }
      return make_dict(std::move(items));
    }
    case Expr::Kind::kAttr: return getattr(eval(*e.args[0]), e.name);
    case Expr::Kind::kItem: {
      Value obj = eval(*e.args[0]);
      if (e.args[1]->kind == Expr::Kind::kSlice) return eval_slice(obj, *e.args[1]);
      return getitem(obj, eval(*e.args[1]));
    }
    case Expr::Kind::kSlice: throw OpError("slice outside of a subscript");
    case Expr::Kind::kCall: {
      Value callee = eval(*e.args[0]);
      CallArgs args;
      eval_args(e, 1, args);
      return call(callee, args);
    }
    case Expr::Kind::kFilter: {
      Value subject = eval(*e.args[0]);
      CallArgs args;
      eval_args(e, 1, args);
      return apply_filter(e.name, subject, args);
    }
    case Expr::Kind::kTest: {
      Value subject = eval(*e.args[0]);
      CallArgs args;
      eval_args(e, 1, args);
      bool r = apply_test(e.name, subject, args);
      return Value(e.negated ? !r : r);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      Value v = eval(*e.args[0]);
      require_defined(v);
      if (!v.is_number()) throw OpError("bad operand type for unary " + std::string(e.kind == Expr::Kind::kNeg ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.kind == Expr::Kind::kPos) return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return Value(-v.as_double());
      if (v.as_int() == INT64_MIN) throw OpError("integer overflow");
      return Value(-v.as_int());
    }
    case Expr::Kind::kNot: return Value(!truthy(eval(*e.args[0])));
    case Expr::Kind::kAnd: {
      Value l = eval(*e.args[0]);
      return truthy(l) ? eval(*e.args[1]) : l;
    }
    case Expr::Kind::kOr: {
      Value l = eval(*e.args[0]);
      return truthy(l) ? l : eval(*e.args[1]);
    }
    case Expr::Kind::kCond: {
      if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if expression evaluated to false and no else section was defined");
    }
    case Expr::Kind::kConcat: {
      std::string s;
      for (const auto& a : e.args) {
        s += to_str(eval(*a));
        if (s.size() > limits_.max_output_bytes) throw OpError("string exceeds the output limit");
      }
      return Value(std::move(s));
    }
    case Expr::Kind::kBinary: {
      Value l = eval(*e.args[0]);
      Value r = eval(*e.args[1]);
      return binary_op(e.name, l, r, limits_.max_output_bytes);
    }
    case Expr::Kind::kCompare: return eval_compare(e);
  }
  throw OpError("unknown expression");
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (std::size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") r = equals(left, right);
    else if (op == "!=") r = !equals(left, right);
    else if (op == "in") r = contains(right, left);
    else if (op == "notin") r = !contains(right, left);
    else {
      int c = compare(left, right);
      r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval_slice(const Value& obj, const Expr& slice) {
  auto bound = [&](const ExprPtr& p) -> std::optional<std::int64_t> {
    if (!p) return std::nullopt;
    Value v = eval(*p);
    if (v.is_none()) return std::nullopt;
    require_defined(v);
    if (!v.is_int() && !v.is_bool()) throw OpError("slice indices must be integers or None");
    return v.as_int();
  };
  auto start = bound(slice.args[0]);
  auto stop = bound(slice.args[1]);
  auto step_v = bound(slice.args[2]);
  std::int64_t step = step_v.value_or(1);
  if (step == 0) throw OpError("slice step cannot be zero");
  auto pick = [&](std::int64_t n) {
    std::vector<std::int64_t> idx;
    auto norm = [&](std::optional<std::int64_t> v, std::int64_t dflt, bool is_stop) {
      if (!v) return dflt;
      std::int64_t x = *v;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
      (void)is_stop;
      return std::clamp<std::int64_t>(x, -1, n - 1);
    };
    std::int64_t b = norm(start, step > 0 ? 0 : n - 1, false);
    std::int64_t en = norm(stop, step > 0 ? n : -1, true);
    for (std::int64_t i = b; step > 0 ? i < en : i > en; i += step) idx.push_back(i);
    return idx;
  };
  if (obj.is_string()) {
    std::u32string u = utf8_decode(obj.str());
    std::u32string out;
    for (auto i : pick(static_cast<std::int64_t>(u.size()))) out.push_back(u[static_cast<std::size_t>(i)]);
    return Value(utf8_encode(out));
  }
  if (obj.is_list() && !obj.list().is_generator) {
    const auto& items = obj.list().items;
    std::vector<Value> out;
    for (auto i : pick(static_cast<std::int64_t>(items.size()))) out.push_back(items[static_cast<std::size_t>(i)]);
    return make_list(std::move(out), obj.list().is_tuple);
  }
  require_defined(obj);
  return Value::undefined("'" + type_repr(obj) + "' is not subscriptable");
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (obj.is_namespace()) {
    if (const Value* v = std::get<NamespacePtr>(obj.v)->find(name)) return *v;
    return Value::undefined("'Namespace object' has no attribute '" + name + "'");
  }
  if (!unsafe_name(name).empty() && name.size() > 1 && name[1] == '_')
    return Value::undefined("access to attribute '" + name + "' is unsafe");
  if (auto m = method_of(obj, name)) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return Value::undefined("'" + type_repr(obj) + "' has no attribute '" + name + "'");
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(key)) return *v;
  } else if (obj.is_list() && obj.list().is_generator) {
    return Value::undefined("'generator' object is not subscriptable");
  } else if (obj.is_list() && (key.is_int() || key.is_bool())) {
    const auto& items = obj.list().items;
    std::int64_t i = key.as_int();
    auto n = static_cast<std::int64_t>(items.size());
    if (i < 0) i += n;
    if (i >= 0 && i < n) return items[static_cast<std::size_t>(i)];
    return Value::undefined("'" + type_repr(obj) + "' has no element " + to_str(key));
  } else if (obj.is_string() && (key.is_int() || key.is_bool())) {
    std::u32string u = utf8_decode(obj.str());
    std::int64_t i = key.as_int();
    auto n = static_cast<std::int64_t>(u.size());
    if (i < 0) i += n;
    if (i >= 0 && i < n) return Value(utf8_encode(std::u32string(1, u[static_cast<std::size_t>(i)])));
    return Value::undefined("'str object' has no element " + to_str(key));
  }
  if (key.is_string()) {
    Value v = getattr(obj, key.str());
    return v;
  }
  return Value::undefined("'" + type_repr(obj) + "' has no element " + repr(key));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  require_defined(callee);
  if (!callee.is_callable()) throw OpError("'" + type_name(callee) + "' object is not callable");
  return std::get<CallablePtr>(callee.v)->fn(*this, args);
}

}  // namespace mlxrt::tmpl::detail
