// The Python methods templates call on values: str.startswith, dict.get, dict.items, ...
// jinja2's immutable sandbox refuses the mutating ones (list.append, dict.update, ...); so do we.
#include <algorithm>
#include <set>

#include "mlxrt/template/interpreter.h"
#include "mlxrt/template/text.h"

namespace mlxrt::tmpl::detail {

std::int64_t parse_index(const std::string& digits) {
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
    throw OpError("invalid index '" + digits + "'");
  return std::stoll(digits);
}

const Value* arg(const CallArgs& args, std::size_t index, const char* keyword) {
  if (index < args.positional.size()) return &args.positional[index];
  if (keyword)
    for (const auto& [k, v] : args.keyword)
      if (k == keyword) return &v;
  return nullptr;
}

std::int64_t int_arg(const CallArgs& args, std::size_t index, const char* keyword, std::int64_t fallback) {
  const Value* v = arg(args, index, keyword);
  if (!v || v->is_none()) return fallback;
  require_defined(*v);
  if (!v->is_int() && !v->is_bool()) throw OpError("an integer is required, got " + type_name(*v));
  return v->as_int();
}

bool bool_arg(const CallArgs& args, std::size_t index, const char* keyword, bool fallback) {
  const Value* v = arg(args, index, keyword);
  return v ? truthy(*v) : fallback;
}

namespace {

using Fn = std::function<Value(Interpreter&, CallArgs&)>;

const std::string& str_arg(const CallArgs& args, std::size_t index, const char* what) {
  const Value* v = arg(args, index, nullptr);
  if (!v) throw OpError(std::string(what) + "() missing required argument");
  require_defined(*v);
  if (!v->is_string()) throw OpError(std::string(what) + "() argument must be str, not " + type_name(*v));
  return v->str();
}

std::optional<std::string> opt_str_arg(const CallArgs& args, std::size_t index) {
  const Value* v = arg(args, index, nullptr);
  if (!v || v->is_none()) return std::nullopt;
  require_defined(*v);
  if (!v->is_string()) throw OpError("argument must be str or None, not " + type_name(*v));
  return v->str();
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.emplace_back(p);
  return make_list(std::move(items));
}

/** startswith/endswith: a str or a tuple of str, with optional start/end (code points). */
Value affix_test(const std::string& s, CallArgs& args, bool prefix) {
  const Value* what = arg(args, 0, nullptr);
  if (!what) throw OpError("startswith/endswith() takes at least 1 argument");
  std::u32string u = utf8_decode(s);
  auto n = static_cast<std::int64_t>(u.size());
  auto norm = [&](std::int64_t x) { return std::clamp<std::int64_t>(x < 0 ? x + n : x, 0, n); };
  std::int64_t b = norm(int_arg(args, 1, nullptr, 0));
  std::int64_t e = norm(int_arg(args, 2, nullptr, n));
  std::string sub = b <= e ? utf8_encode(std::u32string_view(u).substr(b, e - b)) : std::string();
  auto test = [&](const Value& x) {
    require_defined(x);
    if (!x.is_string()) throw OpError("startswith/endswith first arg must be str or a tuple of str, not " + type_name(x));
    const std::string& a = x.str();
    if (b > e) return false;
    if (a.size() > sub.size()) return false;
    return prefix ? sub.compare(0, a.size(), a) == 0 : sub.compare(sub.size() - a.size(), a.size(), a) == 0;
  };
  if (what->is_list() && what->list().is_tuple) {
    for (const auto& x : what->list().items)
      if (test(x)) return Value(true);
    return Value(false);
  }
  return Value(test(*what));
}

std::int64_t find_cp(const std::string& s, const std::string& sub, bool reverse) {
  std::size_t p = reverse ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) return -1;
  return static_cast<std::int64_t>(utf8_length(std::string_view(s).substr(0, p)));
}

std::optional<Fn> string_method(const std::string& s, const std::string& name) {
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return [s, prefix](Interpreter&, CallArgs& a) { return affix_test(s, a, prefix); };
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return [s, l, r](Interpreter&, CallArgs& a) {
      auto chars = opt_str_arg(a, 0);
      return Value(py_strip(s, chars ? &*chars : nullptr, l, r));
    };
  }
  if (name == "split" || name == "rsplit") {
    bool rev = name == "rsplit";
    return [s, rev](Interpreter&, CallArgs& a) {
      std::optional<std::string> sep;
      if (const Value* v = arg(a, 0, "sep"); v && !v->is_none()) {
        require_defined(*v);
        if (!v->is_string()) throw OpError("must be str or None, not " + type_name(*v));
        sep = v->str();
        if (sep->empty()) throw OpError("empty separator");
      }
      std::int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
      return string_list(rev ? py_rsplit(s, sep ? &*sep : nullptr, maxsplit) : py_split(s, sep ? &*sep : nullptr, maxsplit));
    };
  }
  if (name == "splitlines") return [s](Interpreter&, CallArgs&) { return string_list(py_splitlines(s)); };
  if (name == "upper") return [s](Interpreter&, CallArgs&) { return Value(py_upper(s)); };
  if (name == "lower" || name == "casefold") return [s](Interpreter&, CallArgs&) { return Value(py_lower(s)); };
  if (name == "title") return [s](Interpreter&, CallArgs&) { return Value(py_title(s)); };
  if (name == "capitalize") return [s](Interpreter&, CallArgs&) { return Value(py_capitalize(s)); };
  if (name == "replace") {
    return [s](Interpreter& in, CallArgs& a) {
      const std::string& old = str_arg(a, 0, "replace");
      const std::string& repl = str_arg(a, 1, "replace");
      std::string out = py_replace(s, old, repl, int_arg(a, 2, "count", -1));
      if (out.size() > in.max_output()) throw OpError("string exceeds the output limit");
      return Value(std::move(out));
    };
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool rev = name[0] == 'r';
    bool raise = name.find("index") != std::string::npos;
    return [s, rev, raise](Interpreter&, CallArgs& a) {
      std::int64_t r = find_cp(s, str_arg(a, 0, "find"), rev);
      if (r < 0 && raise) throw OpError("substring not found");
      return Value(r);
    };
  }
  if (name == "count") {
    return [s](Interpreter&, CallArgs& a) {
      const std::string& sub = str_arg(a, 0, "count");
      if (sub.empty()) return Value(static_cast<std::int64_t>(utf8_length(s) + 1));
      std::int64_t n = 0;
      for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    };
  }
  if (name == "join") {
    return [s](Interpreter& in, CallArgs& a) {
      const Value* v = arg(a, 0, nullptr);
      if (!v) throw OpError("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(*v)) {
        if (!x.is_string()) throw OpError("sequence item: expected str instance, " + type_name(x) + " found");
        if (!first) out += s;
        first = false;
        out += x.str();
        if (out.size() > in.max_output()) throw OpError("string exceeds the output limit");
      }
      return Value(std::move(out));
    };
  }
  if (name == "format") return [s](Interpreter& in, CallArgs& a) { return Value(str_format(in, s, a)); };
  if (name == "removeprefix" || name == "removesuffix") {
    bool pre = name == "removeprefix";
    return [s, pre](Interpreter&, CallArgs& a) {
      const std::string& x = str_arg(a, 0, "remove");
      if (pre && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
      if (!pre && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(s.substr(0, s.size() - x.size()));
      return Value(s);
    };
  }
  if (name == "partition" || name == "rpartition") {
    bool rev = name == "rpartition";
    return [s, rev](Interpreter&, CallArgs& a) {
      const std::string& sep = str_arg(a, 0, "partition");
      if (sep.empty()) throw OpError("empty separator");
      std::size_t p = rev ? s.rfind(sep) : s.find(sep);
      if (p == std::string::npos)
        return rev ? make_list({Value(""), Value(""), Value(s)}, true) : make_list({Value(s), Value(""), Value("")}, true);
      return make_list({Value(s.substr(0, p)), Value(sep), Value(s.substr(p + sep.size()))}, true);
    };
  }
  auto all_of = [&](bool (*pred)(char32_t)) -> Fn {
    return [s, pred](Interpreter&, CallArgs&) {
      std::u32string u = utf8_decode(s);
      return Value(!u.empty() && std::all_of(u.begin(), u.end(), pred));
    };
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return all_of(py_isdigit);
  if (name == "isalpha") return all_of(py_isalpha);
  if (name == "isalnum") return all_of(py_isalnum);
  if (name == "isspace") return all_of(py_isspace);
  if (name == "islower" || name == "isupper") {
    bool lower = name == "islower";
    return [s, lower](Interpreter&, CallArgs&) {
      std::u32string u = utf8_decode(s);
      bool cased = false;
      for (char32_t c : u) {
        bool is_up = py_lower(c) != c, is_low = py_upper(c) != c;
        if (lower ? is_up : is_low) return Value(false);
        cased = cased || is_up || is_low;
      }
      return Value(cased);
    };
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    return [s, name](Interpreter& in, CallArgs& a) {
      std::int64_t width = int_arg(a, 0, nullptr, 0);
      if (width > static_cast<std::int64_t>(in.max_output())) throw OpError("width exceeds the output limit");
      std::string fill = name == "zfill" ? "0" : " ";
      if (auto f = opt_str_arg(a, 1)) fill = *f;
      auto len = static_cast<std::int64_t>(utf8_length(s));
      if (width <= len) return Value(s);
      std::int64_t pad = width - len;
      std::string out;
      auto rep = [&](std::int64_t k) {
        std::string r;
        for (std::int64_t i = 0; i < k; ++i) r += fill;
        return r;
      };
      if (name == "ljust") out = s + rep(pad);
      else if (name == "rjust") out = rep(pad) + s;
      else if (name == "center") {
        std::int64_t left = pad / 2 + (pad & width & 1);
        out = rep(left) + s + rep(pad - left);
      } else {
        bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
        out = sign ? s.substr(0, 1) + rep(pad) + s.substr(1) : rep(pad) + s;
      }
      return Value(std::move(out));
    };
  }
  return std::nullopt;
}

std::optional<Fn> dict_method(const Value& d, const std::string& name) {
  if (name == "get") {
    return [d](Interpreter&, CallArgs& a) {
      const Value* key = arg(a, 0, nullptr);
      if (!key) throw OpError("get expected at least 1 argument, got 0");
      if (const Value* v = d.dict().find(*key)) return *v;
      const Value* dflt = arg(a, 1, nullptr);
      return dflt ? *dflt : Value::none();
    };
  }
  if (name == "items") {
    return [d](Interpreter&, CallArgs&) {
      std::vector<Value> items;
      for (const auto& [k, v] : d.dict().items) items.push_back(make_list({k, v}, true));
      return make_list(std::move(items));
    };
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return [d, keys](Interpreter&, CallArgs&) {
      std::vector<Value> items;
      for (const auto& [k, v] : d.dict().items) items.push_back(keys ? k : v);
      return make_list(std::move(items));
    };
  }
  if (name == "copy") return [d](Interpreter&, CallArgs&) { return make_dict(d.dict().items); };
  return std::nullopt;
}

std::optional<Fn> list_method(const Value& l, const std::string& name) {
  if (name == "count") {
    return [l](Interpreter&, CallArgs& a) {
      const Value* x = arg(a, 0, nullptr);
      if (!x) throw OpError("count() takes exactly one argument");
      return Value(static_cast<std::int64_t>(
          std::count_if(l.list().items.begin(), l.list().items.end(), [&](const Value& v) { return equals(v, *x); })));
    };
  }
  if (name == "index") {
    return [l](Interpreter&, CallArgs& a) {
      const Value* x = arg(a, 0, nullptr);
      if (!x) throw OpError("index() takes at least 1 argument");
      const auto& items = l.list().items;
      for (std::size_t i = 0; i < items.size(); ++i)
        if (equals(items[i], *x)) return Value(static_cast<std::int64_t>(i));
      throw OpError(repr(*x) + " is not in list");
    };
  }
  if (name == "copy" && !l.list().is_tuple) return [l](Interpreter&, CallArgs&) { return make_list(l.list().items); };
  return std::nullopt;
}

}  // namespace

std::optional<Value> method_of(const Value& obj, const std::string& name) {
  static const std::set<std::string> unsafe_dict = {"clear", "pop", "popitem", "setdefault", "update"};
  static const std::set<std::string> unsafe_list = {"append", "clear", "extend", "insert", "pop",
                                                    "remove", "reverse", "sort"};
  std::optional<Fn> fn;
  if (obj.is_string()) {
    fn = string_method(obj.str(), name);
  } else if (obj.is_dict()) {
    if (unsafe_dict.count(name)) fn = {};
    else fn = dict_method(obj, name);
    if (!fn && unsafe_dict.count(name)) {
      return make_callable(name, [name](Interpreter&, CallArgs&) -> Value {
        throw OpError("access to attribute '" + name + "' of 'dict' object is unsafe.");
      });
    }
  } else if (obj.is_list()) {
    bool is_list = !obj.list().is_tuple;
    if (is_list && unsafe_list.count(name)) {
      return make_callable(name, [name](Interpreter&, CallArgs&) -> Value {
        throw OpError("access to attribute '" + name + "' of 'list' object is unsafe.");
      });
    }
    fn = list_method(obj, name);
  }
  if (!fn) return std::nullopt;
  return make_callable(name, std::move(*fn));
}

}  // namespace mlxrt::tmpl::detail
