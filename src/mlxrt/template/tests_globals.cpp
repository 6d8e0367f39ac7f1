// jinja2's tests (`x is defined`, ...) and the global functions a chat template can call:
// jinja2's range/dict/namespace/cycler/joiner and transformers' raise_exception/strftime_now.
#include <ctime>
#include <map>

#include "mlxrt/template/interpreter.h"
#include "mlxrt/template/parser.h"
#include "mlxrt/template/text.h"

namespace mlxrt::tmpl::detail {

namespace {

using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

const Value& need(const CallArgs& a, const char* test) {
  const Value* v = arg(a, 0, nullptr);
  if (!v) throw OpError(std::string("test '") + test + "' needs an argument");
  return *v;
}

bool integral(const Value& v) { return v.is_int(); }

bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict(); }
// Undefined iterates (empty) and has __getitem__/__call__ attributes, so jinja2 calls it
// iterable, a sequence and callable.
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
  return (v.is_list() && !v.list().is_generator) || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return integral(v); }
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && std::get<bool>(v.v); }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !std::get<bool>(v.v); }
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_callable() || v.is_undefined(); }

std::int64_t int_of(const Value& v, const char* test) {
  require_defined(v);
  if (!v.is_number()) throw OpError(std::string("test '") + test + "' needs a number, got " + type_name(v));
  return v.is_float() ? static_cast<std::int64_t>(v.as_double()) : v.as_int();
}

bool t_even(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_float()) return std::fmod(v.as_double(), 2.0) == 0;
  return int_of(v, "even") % 2 == 0;
}
bool t_odd(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_float()) return std::fabs(std::fmod(v.as_double(), 2.0)) == 1;
  return int_of(v, "odd") % 2 != 0;
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  Value r = binary_op("%", v, need(a, "divisibleby"), 1);
  return r.as_double() == 0;
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return equals(v, need(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !equals(v, need(a, "ne")); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return compare(v, need(a, "lt")) < 0; }
bool t_le(Interpreter&, const Value& v, CallArgs& a) { return compare(v, need(a, "le")) <= 0; }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return compare(v, need(a, "gt")) > 0; }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) { return compare(v, need(a, "ge")) >= 0; }
bool t_in(Interpreter&, const Value& v, CallArgs& a) { return contains(need(a, "in"), v); }
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = need(a, "sameas");
  if (v.is_none() || v.is_bool() || o.is_none() || o.is_bool()) return v.v.index() == o.v.index() && equals(v, o);
  if (v.is_list() && o.is_list()) return std::get<ListPtr>(v.v) == std::get<ListPtr>(o.v);
  if (v.is_dict() && o.is_dict()) return std::get<DictPtr>(v.v) == std::get<DictPtr>(o.v);
  return v.v.index() == o.v.index() && equals(v, o);
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  return py_upper(s) == s && py_lower(s) != s;
}
bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }
bool t_filter(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && is_known_filter(v.str()); }
bool t_test(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && is_known_test(v.str()); }

const std::map<std::string, TestFn>& test_table() {
  static const std::map<std::string, TestFn> table = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
      {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"escaped", t_escaped}, {"even", t_even},
      {"false", t_false}, {"filter", t_filter}, {"float", t_float}, {"ge", t_ge}, {">=", t_ge},
      {"greaterthan", t_gt}, {"gt", t_gt}, {">", t_gt}, {"in", t_in}, {"integer", t_integer},
      {"iterable", t_iterable}, {"le", t_le}, {"<=", t_le}, {"lessthan", t_lt}, {"lt", t_lt}, {"<", t_lt},
      {"lower", t_lower}, {"mapping", t_mapping}, {"ne", t_ne}, {"!=", t_ne}, {"none", t_none},
      {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas}, {"sequence", t_sequence},
      {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined}, {"upper", t_upper},
  };
  return table;
}

// --- globals ---------------------------------------------------------------------------------

Value g_range(Interpreter& in, CallArgs& a) {
  if (!a.keyword.empty()) throw OpError("range() takes no keyword arguments");
  std::int64_t start = 0, stop = 0, step = 1;
  auto num = [](const Value& v) {
    require_defined(v);
    if (!v.is_int() && !v.is_bool()) throw OpError("'" + type_name(v) + "' object cannot be interpreted as an integer");
    return v.as_int();
  };
  if (a.positional.size() == 1) stop = num(a.positional[0]);
  else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = num(a.positional[0]);
    stop = num(a.positional[1]);
    if (a.positional.size() == 3) step = num(a.positional[2]);
  } else {
    throw OpError("range expected 1 to 3 arguments, got " + std::to_string(a.positional.size()));
  }
  if (step == 0) throw OpError("range() arg 3 must not be zero");
  // jinja2's sandbox refuses ranges longer than 100000 items.
  double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
  if (count > 100000) throw OpError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> items;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.emplace_back(i);
  in.tick(items.size() / 16);
  return make_list(std::move(items));
}

Value g_dict(Interpreter&, CallArgs& a) {
  std::vector<std::pair<Value, Value>> items;
  if (a.positional.size() > 1) throw OpError("dict expected at most 1 argument");
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      items = src.dict().items;
    } else {
      for (const auto& pair : iterate(src)) {
        auto kv = iterate(pair);
        if (kv.size() != 2) throw OpError("dictionary update sequence element has wrong length");
        dict_set(items, kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.keyword) dict_set(items, Value(k), v);
  return make_dict(std::move(items));
}

Value g_namespace(Interpreter&, CallArgs& a) {
  auto ns = std::make_shared<NamespaceData>();
  auto check = [](const std::string& k) {
    if (!k.empty() && k[0] == '_')
      throw OpError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k + "'.");
  };
  if (a.positional.size() > 1) throw OpError("namespace expected at most 1 positional argument");
  if (!a.positional.empty()) {
    if (!a.positional[0].is_dict()) throw OpError("namespace() argument must be a mapping");
    for (const auto& [k, v] : a.positional[0].dict().items) {
      std::string key = to_str(k);
      check(key);
      ns->set(key, v);
    }
  }
  for (const auto& [k, v] : a.keyword) {
    check(k);
    ns->set(k, v);
  }
  return Value(NamespacePtr(std::move(ns)));
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
  const Value* m = arg(a, 0, "message");
  throw RaisedByTemplate{m ? to_str(*m) : std::string()};
}

Value g_strftime_now(Interpreter&, CallArgs& a) {
  const Value* f = arg(a, 0, "format");
  if (!f || !f->is_string()) throw OpError("strftime_now() needs a format string");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[1024];
  std::size_t n = std::strftime(buf, sizeof buf, f->str().c_str(), &local);
  if (n == 0 && !f->str().empty()) throw OpError("strftime_now(): the format gives no output or is too long");
  return Value(std::string(buf, n));
}

Value g_joiner(Interpreter&, CallArgs& a) {
  const Value* sep = arg(a, 0, "sep");
  std::string s = sep ? to_str(*sep) : ", ";
  auto used = std::make_shared<bool>(false);
  return make_callable("joiner", [s, used](Interpreter&, CallArgs&) -> Value {
    if (!*used) {
      *used = true;
      return Value("");
    }
    return Value(s);
  });
}

}  // namespace

bool is_known_test(const std::string& name) { return test_table().count(name) > 0; }

bool Interpreter::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  auto it = test_table().find(name);
  if (it == test_table().end()) throw OpError("No test named '" + name + "'.");
  return it->second(*this, subject, args);
}

std::optional<Value> builtin_global(const std::string& name) {
  if (name == "range") return make_callable(name, g_range);
  if (name == "dict") return make_callable(name, g_dict);
  if (name == "namespace") return make_callable(name, g_namespace);
  if (name == "raise_exception") return make_callable(name, g_raise_exception);
  if (name == "strftime_now") return make_callable(name, g_strftime_now);
  if (name == "joiner") return make_callable(name, g_joiner);
  return std::nullopt;
}

}  // namespace mlxrt::tmpl::detail
