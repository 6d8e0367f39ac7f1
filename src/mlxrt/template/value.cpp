#include "mlxrt/template/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "mlxrt/template/text.h"

namespace mlxrt::tmpl::detail {

namespace {
constexpr int kMaxJsonDepth = 512;
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

const Value* NamespaceData::find(const std::string& key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

void NamespaceData::set(const std::string& key, Value value) {
  for (auto& [k, v] : attrs)
    if (k == key) {
      v = std::move(value);
      return;
    }
  attrs.emplace_back(key, std::move(value));
}

Value make_list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<ListData>();
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(ListPtr(std::move(l)));
}

Value make_generator(std::vector<Value> items) {
  auto l = std::make_shared<ListData>();
  l->items = std::move(items);
  l->is_generator = true;
  return Value(ListPtr(std::move(l)));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value make_dict(std::vector<std::pair<Value, Value>> items) {
  auto d = std::make_shared<DictData>();
  d->items = std::move(items);
  return Value(DictPtr(std::move(d)));
}

void dict_set(std::vector<std::pair<Value, Value>>& items, Value key, Value value) {
  for (auto& [k, v] : items)
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

Value make_callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(CallablePtr(std::move(c)));
}

bool truthy(const Value& v) {
  return std::visit(
      [](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined> || std::is_same_v<T, None>) return false;
        else if constexpr (std::is_same_v<T, bool>) return x;
        else if constexpr (std::is_same_v<T, std::int64_t>) return x != 0;
        else if constexpr (std::is_same_v<T, double>) return x != 0.0;
        else if constexpr (std::is_same_v<T, std::string>) return !x.empty();
        else if constexpr (std::is_same_v<T, ListPtr>) return x->is_generator || !x->items.empty();
        else if constexpr (std::is_same_v<T, DictPtr>) return !x->items.empty();
        else return true;
      },
      v.v);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.v.index() != b.v.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.str() == b.str();
  if (a.is_list()) {
    const auto& x = a.list();
    const auto& y = b.list();
    if (x.is_generator || y.is_generator) return &x == &y;
    if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
    for (std::size_t i = 0; i < x.items.size(); ++i)
      if (!equals(x.items[i], y.items[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    const auto& x = a.dict();
    const auto& y = b.dict();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* other = y.find(k);
      if (!other || !equals(v, *other)) return false;
    }
    return true;
  }
  if (a.is_namespace()) return std::get<NamespacePtr>(a.v) == std::get<NamespacePtr>(b.v);
  if (a.is_callable()) return std::get<CallablePtr>(a.v) == std::get<CallablePtr>(b.v);
  return false;
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    auto x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) require_defined(a);
  if (b.is_undefined()) require_defined(b);
  throw OpError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.v.index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return v.list().is_generator ? "generator" : v.list().is_tuple ? "tuple" : "list";
    case 7: return "dict";
    case 8: return "Namespace";
    default: return "function";
  }
}

std::string type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

void require_defined(const Value& v) {
  if (!v.is_undefined()) return;
  const auto& hint = std::get<Undefined>(v.v).hint;
  throw OpError(hint.empty() ? "undefined value" : hint);
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  auto e = s.find('e');
  int exp = std::stoi(s.substr(e + 1));
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits.push_back(c);
  int decpt = exp + 1;
  auto nd = static_cast<int>(digits.size());
  std::string out = neg ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) out += "." + digits.substr(1);
    int x = decpt - 1;
    out += x < 0 ? "e-" : "e+";
    int ax = x < 0 ? -x : x;
    if (ax < 10) out += "0";
    out += std::to_string(ax);
  } else if (decpt <= 0) {
    out += "0." + std::string(-decpt, '0') + digits;
  } else if (decpt >= nd) {
    out += digits + std::string(decpt - nd, '0') + ".0";
  } else {
    out += digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return out;
}

namespace {

void repr_into(std::string& out, const Value& v, bool top);

void seq_repr(std::string& out, const ListData& l) {
  out += l.is_tuple ? "(" : "[";
  for (std::size_t i = 0; i < l.items.size(); ++i) {
    if (i) out += ", ";
    repr_into(out, l.items[i], false);
  }
  if (l.is_tuple && l.items.size() == 1) out += ",";
  out += l.is_tuple ? ")" : "]";
}

void repr_into(std::string& out, const Value& v, bool top) {
  if (v.is_string()) {
    out += top ? v.str() : py_str_repr(v.str());
  } else if (v.is_list() && v.list().is_generator) {
    out += "<generator object>";
  } else if (v.is_list()) {
    seq_repr(out, v.list());
  } else if (v.is_dict()) {
    out += "{";
    bool first = true;
    for (const auto& [k, x] : v.dict().items) {
      if (!first) out += ", ";
      first = false;
      repr_into(out, k, false);
      out += ": ";
      repr_into(out, x, false);
    }
    out += "}";
  } else if (v.is_undefined()) {
    if (!top) out += "Undefined";
  } else if (v.is_none()) {
    out += "None";
  } else if (v.is_bool()) {
    out += std::get<bool>(v.v) ? "True" : "False";
  } else if (v.is_int()) {
    out += std::to_string(std::get<std::int64_t>(v.v));
  } else if (v.is_float()) {
    out += float_repr(std::get<double>(v.v));
  } else if (v.is_namespace()) {
    out += "<Namespace ";
    out += std::to_string(std::get<NamespacePtr>(v.v)->attrs.size());
    out += " attributes>";
  } else {
    out += "<function " + std::get<CallablePtr>(v.v)->name + ">";
  }
}

}  // namespace

std::string to_str(const Value& v) {
  std::string out;
  repr_into(out, v, true);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v, false);
  return out;
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_list() && v.list().is_generator) {
    if (v.list().consumed) return {};
    v.list().consumed = true;
    return v.list().items;
  }
  if (v.is_list()) return v.list().items;
  if (v.is_dict()) {
    std::vector<Value> keys;
    for (const auto& kv : v.dict().items) keys.push_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    for (char32_t c : utf8_decode(v.str())) {
      std::string s;
      utf8_append(s, c);
      chars.emplace_back(std::move(s));
    }
    return chars;
  }
  if (v.is_undefined()) return {};
  throw OpError("'" + type_name(v) + "' object is not iterable");
}

std::int64_t length(const Value& v) {
  if (v.is_string()) return static_cast<std::int64_t>(utf8_length(v.str()));
  if (v.is_list() && !v.list().is_generator) return static_cast<std::int64_t>(v.list().items.size());
  if (v.is_dict()) return static_cast<std::int64_t>(v.dict().items.size());
  if (v.is_undefined()) return 0;
  throw OpError("object of type '" + type_name(v) + "' has no len()");
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) throw OpError("input JSON is nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, depth + 1));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(Value(it.key()), from_json(it.value(), depth + 1));
      return make_dict(std::move(items));
    }
    default: throw OpError("unsupported JSON value (binary)");
  }
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  static const char* hex = "0123456789abcdef";
  auto u_escape = [&](unsigned c) {
    out += "\\u";
    for (int k = 12; k >= 0; k -= 4) out.push_back(hex[(c >> k) & 15]);
  };
  out.push_back('"');
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        char32_t x = c - 0x10000;
        u_escape(0xD800 + (x >> 10));
        u_escape(0xDC00 + (x & 0x3FF));
      } else {
        u_escape(c);
      }
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back('"');
}

std::string json_key(const Value& k) {
  if (k.is_string()) return k.str();
  if (k.is_bool()) return std::get<bool>(k.v) ? "true" : "false";
  if (k.is_none()) return "null";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return float_repr(k.as_double());
  throw OpError("keys must be str, int, float, bool or None, not " + type_name(k));
}

void dump(std::string& out, const Value& v, const DumpOptions& o, int level) {
  if (level > kMaxJsonDepth) throw OpError("tojson: value nested too deeply");
  auto newline = [&](int lvl) {
    if (!o.has_indent) return;
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += o.indent;
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += std::get<bool>(v.v) ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    double d = v.as_double();
    if (std::isnan(d)) out += "NaN";
    else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
    else out += float_repr(d);
  } else if (v.is_string()) {
    json_string(out, v.str(), o.ensure_ascii);
  } else if (v.is_list() && !v.list().is_generator) {
    const auto& items = v.list().items;
    if (items.empty()) {
      out += "[]";
      return;
    }
    out.push_back('[');
    newline(level + 1);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) {
        out += o.item_separator;
        newline(level + 1);
      }
      dump(out, items[i], o, level + 1);
    }
    newline(level);
    out.push_back(']');
  } else if (v.is_dict()) {
    const auto& d = v.dict().items;
    if (d.empty()) {
      out += "{}";
      return;
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const auto& [k, x] : d) entries.emplace_back(json_key(k), &x);
    if (o.sort_keys)
      std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out.push_back('{');
    newline(level + 1);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i) {
        out += o.item_separator;
        newline(level + 1);
      }
      json_string(out, entries[i].first, o.ensure_ascii);
      out += o.key_separator;
      dump(out, *entries[i].second, o, level + 1);
    }
    newline(level);
    out.push_back('}');
  } else {
    throw OpError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string json_dumps(const Value& v, const DumpOptions& opts) {
  std::string out;
  dump(out, v, opts, 0);
  return out;
}

}  // namespace mlxrt::tmpl::detail
