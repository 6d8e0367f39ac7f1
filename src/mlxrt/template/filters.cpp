// jinja2's built-in filters, with transformers' tojson, behaving as jinja2 3.1 does on the values
// templates give them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "mlxrt/template/interpreter.h"
#include "mlxrt/template/parser.h"
#include "mlxrt/template/text.h"

namespace mlxrt::tmpl::detail {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

/** jinja2's make_attrgetter: "a.b.0" looked up item-first, part by part. */
Value get_path(Interpreter& in, const Value& obj, const std::string& path) {
  Value v = obj;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = in.getitem(v, digits ? Value(static_cast<std::int64_t>(parse_index(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

std::string str_of(const Value& v) { return to_str(v); }

Value lowered(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

Value f_tojson(Interpreter&, const Value& v, CallArgs& a) {
  DumpOptions o;
  o.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  if (const Value* ind = arg(a, 1, "indent"); ind && !ind->is_none()) {
    o.has_indent = true;
    if (ind->is_string()) o.indent = ind->str();
    else o.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(ind->as_int(), 0, 1000)), ' ');
    o.item_separator = ",";
  }
  if (const Value* sep = arg(a, 2, "separators"); sep && !sep->is_none()) {
    auto items = iterate(*sep);
    if (items.size() != 2 || !items[0].is_string() || !items[1].is_string())
      throw OpError("tojson separators must be a pair of strings");
    o.item_separator = items[0].str();
    o.key_separator = items[1].str();
  }
  o.sort_keys = bool_arg(a, 3, "sort_keys", false);
  require_defined(v);
  return Value(json_dumps(v, o));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  std::optional<std::string> chars;
  if (const Value* c = arg(a, 0, "chars"); c && !c->is_none()) chars = to_str(*c);
  return Value(py_strip(str_of(v), chars ? &*chars : nullptr, true, true));
}

Value f_length(Interpreter&, const Value& v, CallArgs&) { return Value(length(v)); }

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default_value");
  bool boolean = bool_arg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return d ? *d : Value("");
  return v;
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* sep = arg(a, 0, "d");
  const Value* attr = arg(a, 1, "attribute");
  std::string s = sep ? str_of(*sep) : "";
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += s;
    first = false;
    out += str_of(attr && !attr->is_none() ? get_path(in, item, str_of(*attr)) : item);
    if (out.size() > in.max_output()) throw OpError("string exceeds the output limit");
  }
  return Value(std::move(out));
}

Value f_upper(Interpreter&, const Value& v, CallArgs&) { return Value(py_upper(str_of(v))); }
Value f_lower(Interpreter&, const Value& v, CallArgs&) { return Value(py_lower(str_of(v))); }
Value f_capitalize(Interpreter&, const Value& v, CallArgs&) { return Value(py_capitalize(str_of(v))); }

Value f_title(Interpreter&, const Value& v, CallArgs&) {
  // jinja2 capitalises each piece after a run of [-\s({\[<].
  std::u32string u = utf8_decode(str_of(v));
  auto sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  bool start = true;
  for (auto& c : u) {
    if (sep(c)) {
      start = true;
      continue;
    }
    c = start ? py_upper(c) : py_lower(c);
    start = false;
  }
  return Value(utf8_encode(u));
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* old = arg(a, 0, "old");
  const Value* repl = arg(a, 1, "new");
  if (!old || !repl) throw OpError("replace() missing required argument");
  std::string out = py_replace(str_of(v), str_of(*old), str_of(*repl), int_arg(a, 2, "count", -1));
  if (out.size() > in.max_output()) throw OpError("string exceeds the output limit");
  return Value(std::move(out));
}

Value f_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string() ? v : Value(str_of(v)); }
Value f_safe(Interpreter&, const Value& v, CallArgs&) {
  Value r(str_of(v));
  r.markup = true;
  return r;
}

Value f_escape(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string() && v.markup) return v;
  Value r(html_escape(str_of(v)));
  r.markup = true;
  return r;
}

Value f_forceescape(Interpreter&, const Value& v, CallArgs&) {
  Value r(html_escape(str_of(v)));
  r.markup = true;
  return r;
}

std::optional<double> parse_float(const std::string& s) {
  std::string t = py_strip(s, nullptr, true, true);
  std::string cleaned;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_' && i > 0 && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(t[i + 1])))
      continue;
    cleaned.push_back(t[i]);
  }
  if (cleaned.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  std::string lower = py_lower(cleaned);
  if (lower.find("0x") != std::string::npos) return std::nullopt;  // strtod reads hex floats; Python does not
  return d;
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  Value dflt = d ? *d : Value(0);
  std::int64_t base = int_arg(a, 1, "base", 10);
  require_defined(v);
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    double x = v.as_double();
    if (!std::isfinite(x)) return dflt;
    return Value(static_cast<std::int64_t>(x));
  }
  if (v.is_string()) {
    std::string t = py_strip(v.str(), nullptr, true, true);
    std::string digits;
    for (char c : t)
      if (c != '_') digits.push_back(c);
    if (!digits.empty()) {
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
      if (end == digits.c_str() + digits.size() && errno == 0) return Value(static_cast<std::int64_t>(x));
    }
    if (auto f = parse_float(v.str()); f && std::isfinite(*f)) return Value(static_cast<std::int64_t>(*f));
  }
  return dflt;
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  Value dflt = d ? *d : Value(0.0);
  require_defined(v);
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string())
    if (auto f = parse_float(v.str())) return Value(*f);
  return dflt;
}

Value f_abs(Interpreter&, const Value& v, CallArgs&) {
  require_defined(v);
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  throw OpError("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  std::int64_t precision = int_arg(a, 0, "precision", 0);
  std::string method = "common";
  if (const Value* m = arg(a, 1, "method")) method = str_of(*m);
  require_defined(v);
  if (!v.is_number()) throw OpError("type " + type_name(v) + " doesn't define __round__ method");
  double x = v.as_double();
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  if (method != "common") throw OpError("method must be 'common', 'ceil' or 'floor'");
  if (!v.is_float()) return v.is_bool() ? Value(v.as_int()) : v;
  if (!std::isfinite(x)) return v;
  // Python's round() is correctly rounded, half to even, on the exact binary value; so is printf.
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<std::int64_t>(precision, 0, 300)), x);
  double r = std::strtod(buf, nullptr);
  if (precision < 0) r = std::nearbyint(x * scale) / scale;
  return Value(r);
}

Value f_list(Interpreter&, const Value& v, CallArgs&) { return make_list(iterate(v)); }

Value f_first(Interpreter&, const Value& v, CallArgs&) {
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_list() && v.list().is_generator) throw OpError("'generator' object is not reversible");
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return make_list({});
  if (!v.is_dict()) throw OpError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().items) out.push_back(make_list({k, x}, true));
  return make_list(std::move(out));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return make_generator({});
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, x] : a.keyword) {
    if (k == "attribute") attribute = &x;
    else if (k == "default") dflt = &x;
  }
  if (attribute) {
    for (const auto& item : iterate(v)) {
      Value r = get_path(in, item, str_of(*attribute));
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return make_generator(std::move(out));
  }
  if (a.positional.empty()) throw OpError("map requires a filter argument");
  std::string name = str_of(a.positional[0]);
  if (!is_known_filter(name)) throw OpError("No filter named '" + name + "'.");
  for (const auto& item : iterate(v)) {
    in.tick();
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    out.push_back(in.apply_filter(name, item, rest));
  }
  return make_generator(std::move(out));
}

Value select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  std::size_t base = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty()) throw OpError("Missing parameter for attribute name");
    attr = str_of(a.positional[0]);
  }
  std::optional<std::string> test;
  if (a.positional.size() > base) test = str_of(a.positional[base]);
  if (test && !is_known_test(*test)) throw OpError("No test named '" + *test + "'.");
  std::vector<Value> out;
  if (!truthy(v)) return make_generator({});
  for (const auto& item : iterate(v)) {
    in.tick();
    Value subject = by_attr ? get_path(in, item, attr) : item;
    bool r;
    if (test) {
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(base + 1), a.positional.end());
      rest.keyword = a.keyword;
      r = in.apply_test(*test, subject, rest);
    } else {
      r = truthy(subject);
    }
    if (r == keep) out.push_back(item);
  }
  return make_generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

Value sort_key(Interpreter& in, const Value& item, const Value* attribute, bool case_sensitive) {
  Value k = attribute && !attribute->is_none() ? get_path(in, item, str_of(*attribute)) : item;
  return lowered(k, case_sensitive);
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  bool reverse = bool_arg(a, 0, "reverse", false);
  bool cs = bool_arg(a, 1, "case_sensitive", false);
  const Value* attribute = arg(a, 2, "attribute");
  auto items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(sort_key(in, item, attribute, cs), item);
  in.tick(keyed.size());
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return make_list(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  std::vector<Value> seen, out;
  for (const auto& item : iterate(v)) {
    in.tick();
    Value k = sort_key(in, item, attribute, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return make_list(std::move(out));
}

Value f_reverse(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return Value(utf8_encode(u));
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return make_list(std::move(items));
}

Value f_batch(Interpreter&, const Value& v, CallArgs& a) {
  std::int64_t n = int_arg(a, 0, "linecount", 1);
  if (n <= 0) throw OpError("batch size must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  std::vector<Value> out, cur;
  for (const auto& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<std::int64_t>(cur.size()) == n) out.push_back(make_list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<std::int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(make_list(std::move(cur)));
  }
  return make_list(std::move(out));
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  std::string ind = "    ";
  if (const Value* w = arg(a, 0, "width")) {
    if (w->is_string()) ind = w->str();
    else ind = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(w->as_int(), 0, 1000)), ' ');
  }
  bool first = bool_arg(a, 1, "first", false);
  bool blank = bool_arg(a, 2, "blank", false);
  std::string s = str_of(v) + "\n";
  auto lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  if (rv.size() > in.max_output()) throw OpError("string exceeds the output limit");
  return Value(std::move(rv));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(str_of(v))) {
    bool w = py_isalnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  std::string by = "key";
  if (const Value* b = arg(a, 1, "by")) by = str_of(*b);
  bool reverse = bool_arg(a, 2, "reverse", false);
  if (by != "key" && by != "value") throw OpError("You can only sort by either \"key\" or \"value\"");
  Value items = f_items(in, v, a);
  std::vector<Value> pairs = items.list().items;
  std::size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    Value kx = lowered(x.list().items[pos], cs), ky = lowered(y.list().items[pos], cs);
    return reverse ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
  });
  return make_list(std::move(pairs));
}

Value f_format(Interpreter&, const Value& v, CallArgs& a) {
  if (!a.keyword.empty()) {
    std::vector<std::pair<Value, Value>> kw;
    for (const auto& [k, x] : a.keyword) kw.emplace_back(Value(k), x);
    return Value(percent_format(str_of(v), make_dict(std::move(kw))));
  }
  return Value(percent_format(str_of(v), make_list(a.positional, true)));
}

Value f_count(Interpreter& in, const Value& v, CallArgs& a) { return f_length(in, v, a); }

Value minmax(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  auto items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  std::size_t best = 0;
  Value best_key = sort_key(in, items[0], attribute, cs);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(in, items[i], attribute, cs);
    int c = compare(k, best_key);
    if (want_max ? c > 0 : c < 0) best = i, best_key = k;
  }
  return items[best];
}

Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return minmax(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return minmax(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* attribute = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value total = start ? *start : Value(0);
  for (const auto& item : iterate(v))
    total = binary_op("+", total, attribute && !attribute->is_none() ? get_path(in, item, str_of(*attribute)) : item, in.max_output());
  return total;
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* name = arg(a, 0, "name");
  if (!name) throw OpError("attr() missing required argument 'name'");
  return in.getattr(v, str_of(*name));
}

Value f_center(Interpreter&, const Value& v, CallArgs& a) {
  std::string s = str_of(v);
  std::int64_t width = std::clamp<std::int64_t>(int_arg(a, 0, "width", 80), 0, 100000);
  auto len = static_cast<std::int64_t>(utf8_length(s));
  if (width <= len) return Value(s);
  std::int64_t pad = width - len;
  std::int64_t left = pad / 2 + (pad & width & 1);
  return Value(std::string(static_cast<std::size_t>(left), ' ') + s + std::string(static_cast<std::size_t>(pad - left), ' '));
}

const std::map<std::string, FilterFn>& filter_table() {
  static const std::map<std::string, FilterFn> table = {
      {"abs", f_abs},         {"attr", f_attr},         {"batch", f_batch},         {"capitalize", f_capitalize},
      {"center", f_center},   {"count", f_count},       {"d", f_default},           {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},        {"escape", f_escape},       {"first", f_first},
      {"float", f_float},     {"forceescape", f_forceescape}, {"format", f_format},      {"indent", f_indent},
      {"int", f_int},         {"items", f_items},       {"join", f_join},           {"last", f_last},
      {"length", f_length},   {"list", f_list},         {"lower", f_lower},         {"map", f_map},
      {"max", f_max},         {"min", f_min},           {"reject", f_reject},       {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},   {"round", f_round},         {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},       {"string", f_string},
      {"sum", f_sum},         {"title", f_title},       {"tojson", f_tojson},       {"trim", f_trim},
      {"unique", f_unique},   {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return table;
}

/** jinja2 filters that exist but that chat templates do not use; they parse, and fail when run. */
const std::set<std::string>& other_jinja_filters() {
  static const std::set<std::string> names = {"filesizeformat", "groupby", "pprint", "random", "slice",
                                              "striptags", "truncate", "urlencode", "urlize", "wordwrap",
                                              "xmlattr"};
  return names;
}

}  // namespace

bool is_known_filter(const std::string& name) {
  return filter_table().count(name) > 0 || other_jinja_filters().count(name) > 0;
}

Value Interpreter::apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  auto it = filter_table().find(name);
  if (it == filter_table().end()) throw OpError("the filter '" + name + "' is not supported by this runtime");
  return it->second(*this, subject, args);
}

}  // namespace mlxrt::tmpl::detail
