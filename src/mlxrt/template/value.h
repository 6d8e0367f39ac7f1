#pragma once
/** The values a template computes with, modelled on the Python objects jinja2 sees: None, bool,
 * int, float, str, list/tuple, dict (insertion-ordered), jinja's Undefined, namespace objects and
 * callables. Containers are shared and never mutated after construction (the sandbox is immutable),
 * except namespaces, whose attributes `{% set ns.x = ... %}` assigns. */
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxrt::tmpl::detail {

/** An error raised by an operation on values; the interpreter adds the template location. */
class OpError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Value;
struct Interpreter;

struct Undefined {
  std::string hint;  // why it is undefined, shown when it is used in a way that fails
};
struct None {};
struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  // jinja2's map/select/... return one-pass generators: always truthy, no len(), not JSON
  // serialisable, empty once iterated. Generators live only inside one render.
  bool is_generator = false;
  mutable bool consumed = false;
};
struct DictData;
struct NamespaceData;

/** Arguments of a call: positional then keyword, in source order. */
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
};

using ListPtr = std::shared_ptr<const ListData>;
using DictPtr = std::shared_ptr<const DictData>;
using NamespacePtr = std::shared_ptr<NamespaceData>;
using CallablePtr = std::shared_ptr<const Callable>;

struct Value {
  std::variant<Undefined, None, bool, std::int64_t, double, std::string, ListPtr, DictPtr, NamespacePtr,
               CallablePtr>
      v;

  // markupsafe.Markup (from `safe`/`escape`): adding a plain str to it HTML-escapes that str.
  bool markup = false;

  Value() : v(Undefined{}) {}
  static Value undefined(std::string hint = {}) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(None{}); }
  Value(bool b) : v(b) {}
  Value(std::int64_t i) : v(i) {}
  Value(int i) : v(static_cast<std::int64_t>(i)) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(ListPtr l) : v(std::move(l)) {}
  Value(DictPtr d) : v(std::move(d)) {}
  Value(NamespacePtr n) : v(std::move(n)) {}
  Value(CallablePtr c) : v(std::move(c)) {}
  Value(Undefined u) : v(std::move(u)) {}
  Value(None n) : v(n) {}

  bool is_undefined() const { return std::holds_alternative<Undefined>(v); }
  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<ListPtr>(v); }
  bool is_dict() const { return std::holds_alternative<DictPtr>(v); }
  bool is_namespace() const { return std::holds_alternative<NamespacePtr>(v); }
  bool is_callable() const { return std::holds_alternative<CallablePtr>(v); }

  const std::string& str() const { return std::get<std::string>(v); }
  const ListData& list() const { return *std::get<ListPtr>(v); }
  const DictData& dict() const { return *std::get<DictPtr>(v); }
  /** The integer (bool counts as int); OpError for other types, which a template can pass anywhere. */
  std::int64_t as_int() const {
    if (is_bool()) return std::get<bool>(v) ? 1 : 0;
    if (!is_int()) throw OpError("an integer is required");
    return std::get<std::int64_t>(v);
  }
  double as_double() const {
    if (is_float()) return std::get<double>(v);
    if (!is_int() && !is_bool()) throw OpError("a number is required");
    return static_cast<double>(as_int());
  }
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;
  /** The value under `key` (Python equality: 1 == 1.0 == True), or nullptr. */
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
};

struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

Value make_list(std::vector<Value> items, bool is_tuple = false);
Value make_generator(std::vector<Value> items);
/** markupsafe.escape of a plain string. */
std::string html_escape(const std::string& s);
Value make_dict(std::vector<std::pair<Value, Value>> items);
/** A dict built key by key: a repeated key keeps its first position and takes the last value. */
void dict_set(std::vector<std::pair<Value, Value>>& items, Value key, Value value);
Value make_callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);

/** Python truthiness (Undefined is false). */
bool truthy(const Value& v);
/** Python ==. */
bool equals(const Value& a, const Value& b);
/** Python <, -1/0/1; OpError when the types do not order. */
int compare(const Value& a, const Value& b);
/** The type name jinja2 uses in messages ("dict object", "str object", "None"). */
std::string type_repr(const Value& v);
/** Python's type name ("dict", "str", "NoneType"). */
std::string type_name(const Value& v);

/** str(value) as Python prints it (Undefined prints as the empty string). */
std::string to_str(const Value& v);
/** repr(value) as Python prints it. */
std::string repr(const Value& v);
/** float.__repr__ (shortest round-trip, Python's exponent rules). */
std::string float_repr(double d);
/** Throws OpError naming the hint when `v` is undefined (using an undefined value further). */
void require_defined(const Value& v);

/** The items a for loop visits: list items, dict keys, string characters. */
std::vector<Value> iterate(const Value& v);
/** len(); OpError for values without a length. */
std::int64_t length(const Value& v);

/** Conversion from JSON input (depth-limited) and to JSON output (tojson). */
Value from_json(const nlohmann::ordered_json& j, int depth = 0);

struct DumpOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
/** json.dumps(value, ...) byte-for-byte as Python writes it. */
std::string json_dumps(const Value& v, const DumpOptions& opts);

}  // namespace mlxrt::tmpl::detail
