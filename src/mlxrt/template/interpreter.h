#pragma once
/** The tree-walking renderer. One Interpreter per render call: it owns the scopes, the output and
 * the sandbox counters, while the parsed Program it reads stays shared and immutable. */
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mlxrt/template/ast.h"
#include "mlxrt/template/chat_template.h"

namespace mlxrt::tmpl::detail {

struct Program {
  std::string name;
  std::string source;
  Body body;
};

/** Thrown by raise_exception(); the interpreter adds the position. */
struct RaisedByTemplate {
  std::string message;
};

using Frame = std::vector<std::pair<std::string, Value>>;

struct Interpreter {
  Interpreter(const Program& program, const RenderLimits& limits, Value context);

  std::string render();

  // --- used by filters, tests and methods ---------------------------------------------------
  Value call(const Value& callee, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
  bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
  /** Counts one loop iteration (or comparable unit of work) against the sandbox budget. */
  void tick(std::size_t n = 1);
  std::size_t max_output() const { return limits_.max_output_bytes; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_if(const Stmt& s, Flow& flow);
  void exec_set(const Stmt& s);
  void exec_macro(const Stmt& s);
  void exec_call_block(const Stmt& s);
  void assign(const Expr& target, const Value& value);
  Value make_macro(std::shared_ptr<MacroDef> macro);
  std::string capture(const Body& body);

  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_slice(const Value& obj, const Expr& slice);
  void eval_args(const Expr& e, std::size_t first, CallArgs& args);
  Value lookup(const std::string& name) const;
  void set_var(const std::string& name, Value value);
  void write(std::string_view s);

  const Program& program_;
  RenderLimits limits_;
  Value context_;  // the render's variables (a dict)
  Frame root_;     // top-level `set`s and macros
  std::vector<Frame> stack_;
  std::string output_;
  std::string* sink_ = &output_;
  std::size_t iterations_ = 0;
  int call_depth_ = 0;
};

/** Arithmetic and operators (operators.cpp). */
Value binary_op(const std::string& op, const Value& a, const Value& b, std::size_t max_size);
bool contains(const Value& container, const Value& item);

/** Attribute methods of str, dict and list values (methods.cpp): nullopt when `name` is none. */
std::optional<Value> method_of(const Value& obj, const std::string& name);

/** Built-in global functions (range, dict, namespace, raise_exception, strftime_now, ...). */
std::optional<Value> builtin_global(const std::string& name);

/** Python's `format % args` (printf-style) and str.format. */
std::string percent_format(const std::string& format, const Value& args);
std::string str_format(Interpreter& in, const std::string& format, const CallArgs& args);

/** A decimal index written in the template ("3" in "a.3" or "{3}"); OpError when it is not one. */
std::int64_t parse_index(const std::string& digits);

/** Helpers for reading call arguments by position or keyword. */
const Value* arg(const CallArgs& args, std::size_t index, const char* keyword);
std::int64_t int_arg(const CallArgs& args, std::size_t index, const char* keyword, std::int64_t fallback);
bool bool_arg(const CallArgs& args, std::size_t index, const char* keyword, bool fallback);

}  // namespace mlxrt::tmpl::detail
