// Port of mlx_lm/tool_parsers/*.py (mlx-lm 0.32.2): json_tools, qwen3_coder, mistral, gemma4,
// function_gemma, pythonic, glm47 (and laguna, which reuses it), kimi_k2, kimi_k3, minimax_m2,
// minicpm5, longcat, muse_spark. Each regular expression of the modules is matched by hand with
// the `regex` module's semantics (leftmost match, the same greedy/lazy choices and backtracking),
// and each Python step keeps its exceptions, so a text mlx-lm rejects is rejected here.
#include "mlxrt/server/tool_parsers.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "mlxrt/server/python_json.h"

namespace mlxrt::server::tool_parsers {

namespace {

using py::Error;
using py::ErrorKind;
using py::Json;
using U = std::u32string;
constexpr size_t npos = U::npos;

[[noreturn]] void value_error(const std::string& what) { throw Error(ErrorKind::Value, what); }
[[noreturn]] void other_error(const std::string& what) { throw Error(ErrorKind::Other, what); }

std::string utf8(const U& s) { return py::to_utf8(s); }
U u32(const std::string& s) { return py::to_u32(s); }
U u32(const char* s) { return py::to_u32(std::string(s)); }

/** A one-call result stays a dict, several a list (the modules' `calls[0] if len == 1`). */
Json one_or_list(Json calls) {
  if (calls.size() == 1) return calls[0];
  return calls;
}

Json call(const std::string& name, Json arguments) {
  Json c = Json::object();
  c["name"] = name;
  c["arguments"] = std::move(arguments);
  return c;
}

/** dict.get on a JSON value that must be a dict in Python (else AttributeError). */
const Json* get(const Json& obj, const char* key) {
  if (!obj.is_object()) other_error("'" + std::string(obj.type_name()) + "' object has no attribute 'get'");
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

/** Iterating `tools` (None: nothing; a list: its items; a dict: its keys, as Python would). */
std::vector<Json> tool_items(const Json& tools) {
  std::vector<Json> out;
  if (tools.is_null()) return out;
  if (tools.is_array()) return std::vector<Json>(tools.begin(), tools.end());
  if (tools.is_object()) {
    for (auto it = tools.begin(); it != tools.end(); ++it) out.emplace_back(it.key());
    return out;
  }
  other_error("'tools' is not iterable");
}

/** Python's `$` without MULTILINE: the end, or just before a final newline. */
bool at_dollar(const U& s, size_t i) { return i == s.size() || (i + 1 == s.size() && s[i] == '\n'); }

/** str(value) for a value from JSON. */
std::string py_repr(const Json& v);
std::string py_str(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  return py_repr(v);
}

bool printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F)) return false;
  if (c == 0x1680 || c == 0x3000 || c == 0xFEFF || (c >= 0xD800 && c <= 0xF8FF) || c == 0xFFF9 || c == 0xFFFA ||
      c == 0xFFFB || c >= 0xF0000)
    return false;
  return true;
}

std::string repr_string(const std::string& s8) {
  U s = u32(s8);
  bool has_single = s.find(U'\'') != npos, has_double = s.find(U'"') != npos;
  char32_t q = has_single && !has_double ? U'"' : U'\'';
  std::string out(1, static_cast<char>(q));
  for (char32_t c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (printable(c)) {
      out += py::to_utf8(c);
    } else {
      char buf[16];
      if (c < 0x100) std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out += static_cast<char>(q);
  return out;
}

std::string py_repr(const Json& v) {
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    return python_float_repr(d);
  }
  if (v.is_number()) return v.dump();
  if (v.is_string()) return repr_string(v.get<std::string>());
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + py_repr(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (first ? "" : ", ") + repr_string(it.key()) + ": " + py_repr(it.value());
      first = false;
    }
    return out + "}";
  }
  return "<object>";
}

/** glm47 / kimi_k2 / longcat's _deserialize: json.loads, else ast.literal_eval, else the text. */
Json deserialize(const U& value) {
  try {
    return py::json_loads(value);
  } catch (const Error&) {
  }
  try {
    return py::literal_eval(value);
  } catch (const Error&) {
  }
  return utf8(value);
}

bool is_word_or_dash(char32_t c) { return c == '-' || py::is_word(c); }

// --- json_tools -------------------------------------------------------------------------------

Json parse_json_tools(const U& text, const Json&) { return py::json_loads(py::strip(text)); }

// --- qwen3_coder ------------------------------------------------------------------------------

/** `\s*([^\s<>]+)>?` matched at the start: the name and where the match ends. */
std::optional<std::pair<U, size_t>> qwen_name(const U& s) {
  size_t i = 0;
  while (i < s.size() && py::is_re_space(s[i])) ++i;
  size_t b = i;
  while (i < s.size() && !py::is_re_space(s[i]) && s[i] != '<' && s[i] != '>') ++i;
  if (i == b) return std::nullopt;
  U name = s.substr(b, i - b);
  if (i < s.size() && s[i] == '>') ++i;
  return std::make_pair(name, i);
}

Json qwen_arguments_config(const std::string& func_name, const Json& tools) {
  if (tools.is_null()) return Json::object();
  for (const Json& tool : tool_items(tools)) {
    const Json* function = get(tool, "function");
    if (!function || !py::truthy(*function)) continue;
    if (!function->is_object() || !function->contains("name")) other_error("KeyError: 'name'");
    if ((*function)["name"] == Json(func_name)) {
      const Json* params = get(*function, "parameters");
      if (!params || !py::truthy(*params)) return Json::object();
      const Json* props = get(*params, "properties");
      return props ? *props : Json::object();
    }
  }
  return Json::object();
}

bool starts_with_ascii(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

Json qwen_convert(const U& value, const std::string& param_name, const Json& config) {
  if (py::lower_ascii(value) == U"null") return nullptr;
  const Json* param = get(config, param_name.c_str());
  if (!param || !py::truthy(*param)) return utf8(value);
  bool has_type = false;
  if (param->is_object()) {
    has_type = param->contains("type");
  } else if (param->is_string() || param->is_array()) {
    has_type = param->is_string() ? param->get<std::string>().find("type") != std::string::npos
                                  : std::find(param->begin(), param->end(), Json("type")) != param->end();
    if (has_type) other_error("indices must be integers");
  } else {
    other_error("argument of type is not iterable");
  }
  if (!has_type) {
    Json v;
    try {
      v = py::json_loads(value);
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value) throw;
      return utf8(value);
    }
    return (v.is_object() || v.is_array()) ? v : Json(utf8(value));
  }
  const Json& t = (*param)["type"];
  std::string type = t.is_string() ? utf8(py::lower_ascii(py::strip(u32(t.get<std::string>())))) : "[";
  static const std::set<std::string> kStr{"string", "str", "text", "varchar", "char", "enum"};
  static const std::set<std::string> kBool{"boolean", "bool", "binary"};
  static const std::set<std::string> kObj{"object", "array", "arr"};
  if (kStr.count(type)) return utf8(value);
  if (starts_with_ascii(type, "int") || starts_with_ascii(type, "uint") || starts_with_ascii(type, "long") ||
      starts_with_ascii(type, "short") || starts_with_ascii(type, "unsigned")) {
    double f = py::py_float(value);
    Json i = py::int_of_float(f);
    if (f - std::trunc(f) != 0) value_error("Invalid integer literal");
    return i;
  }
  if (starts_with_ascii(type, "num") || starts_with_ascii(type, "float")) {
    double f = py::py_float(value);
    Json i = py::int_of_float(f);
    return f - std::trunc(f) != 0 ? Json(f) : i;
  }
  if (kBool.count(type)) return py::lower_ascii(value) == U"true";
  if (kObj.count(type) || starts_with_ascii(type, "dict") || starts_with_ascii(type, "list")) {
    try {
      return py::json_loads(value, false);
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value) throw;
    }
  }
  try {
    return py::literal_eval(value);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Value && e.kind != ErrorKind::Syntax) throw;
    return utf8(value);
  }
}

Json parse_qwen3_coder(const U& text, const Json& tools) {
  // _function_regex.findall: <function=(.*?)</function>$, the first match.
  static const U kOpen = U"<function=", kClose = U"</function>";
  size_t open = text.find(kOpen);
  std::optional<U> body;
  if (open != npos) {
    for (size_t end : {text.size(), text.size() - (text.empty() ? 0 : 1)}) {
      if (end < kClose.size() || end > text.size()) continue;
      size_t c = end - kClose.size();
      if (text.compare(c, kClose.size(), kClose) != 0 || !at_dollar(text, end) || c < open + kOpen.size()) continue;
      body = text.substr(open + kOpen.size(), c - open - kOpen.size());
      break;
    }
  }
  if (!body) value_error("No function provided.");
  auto name = qwen_name(*body);
  if (!name) value_error("No function name provided.");
  std::string function_name = utf8(name->first);
  Json config = qwen_arguments_config(function_name, tools);
  U params = body->substr(name->second);
  Json args = Json::object();
  static const U kPOpen = U"<parameter=", kPClose = U"</parameter>";
  size_t pos = 0;
  for (;;) {
    size_t b = params.find(kPOpen, pos);
    if (b == npos) break;
    size_t e = params.find(kPClose, b + kPOpen.size());
    if (e == npos) break;
    U match = params.substr(b + kPOpen.size(), e - b - kPOpen.size());
    pos = e + kPClose.size();
    auto pname = qwen_name(match);
    if (!pname) continue;
    U value = match.substr(pname->second);
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    std::string key = utf8(pname->first);
    args[key] = qwen_convert(value, key, config);
  }
  return call(function_name, std::move(args));
}

// --- mistral ----------------------------------------------------------------------------------

Json mistral_json_calls(const U& text) {
  Json payload;
  try {
    payload = py::json_loads(text);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Value) throw;
    return Json::array();
  }
  if (!payload.is_array()) return Json::array();
  Json calls = Json::array();
  for (const Json& c : payload) {
    Json name = nullptr, arguments = nullptr;
    if (c.is_object()) {
      if (auto it = c.find("name"); it != c.end()) name = *it;
      auto it = c.find("arguments");
      arguments = it != c.end() ? *it : Json::object();
    }
    if (arguments.is_string()) {
      try {
        arguments = py::json_loads(u32(arguments.get<std::string>()));
      } catch (const Error& e) {
        if (e.kind != ErrorKind::Value) throw;
        arguments = nullptr;
      }
    }
    if (!name.is_string() || !arguments.is_object()) value_error("Could not parse tool call");
    Json parsed = call(name.get<std::string>(), arguments);
    if (auto it = c.find("id"); it != c.end() && it->is_string()) parsed["id"] = *it;
    calls.push_back(std::move(parsed));
  }
  return calls;
}

Json mistral_header_calls(const U& text) {
  static const U kArgs = U"[ARGS]";
  Json calls = Json::array();
  size_t pos = 0;
  for (;;) {
    // _tool_call_header_regex.search(text, pos): ([\w-]+)\s*\[ARGS\]\s*
    std::optional<std::pair<U, size_t>> found;
    for (size_t i = pos; i < text.size() && !found; ++i) {
      if (!is_word_or_dash(text[i])) continue;
      size_t j = i;
      while (j < text.size() && is_word_or_dash(text[j])) ++j;
      size_t k = j;
      while (k < text.size() && py::is_re_space(text[k])) ++k;
      if (text.compare(k, kArgs.size(), kArgs) == 0) {
        k += kArgs.size();
        while (k < text.size() && py::is_re_space(text[k])) ++k;
        found = std::make_pair(text.substr(i, j - i), k);
      }
    }
    if (!found) break;
    auto [arguments, end] = [&] {
      try {
        return py::json_raw_decode(text, found->second);
      } catch (const Error& e) {
        if (e.kind != ErrorKind::Value) throw;
        value_error("Could not parse tool call");
      }
    }();
    pos = end;
    calls.push_back(call(utf8(found->first), std::move(arguments)));
  }
  return calls;
}

Json parse_mistral(const U& text, const Json&) {
  Json calls = mistral_json_calls(text);
  if (calls.empty()) calls = mistral_header_calls(text);
  if (calls.empty()) value_error("Could not parse tool call");
  return one_or_list(std::move(calls));
}

// --- gemma4 -----------------------------------------------------------------------------------

const U kGemmaQuote = U"<|\"|>";

/** The balanced {...} group starting at i (strings in <|"|> are opaque); its end, or npos. The
 * regex's recursion (?2), kept as a depth count. */
size_t gemma4_group(const U& s, size_t i) {
  if (i >= s.size() || s[i] != '{') return npos;
  size_t depth = 0;
  while (i < s.size()) {
    char32_t c = s[i];
    if (c == '{') {
      ++depth;
      ++i;
    } else if (c == '}') {
      ++i;
      if (--depth == 0) return i;
    } else if (c == '<' && s.compare(i, kGemmaQuote.size(), kGemmaQuote) == 0) {
      size_t close = s.find(kGemmaQuote, i + kGemmaQuote.size());
      if (close == npos) return npos;
      i = close + kGemmaQuote.size();
    } else {
      ++i;
    }
  }
  return npos;
}

U placeholder(size_t n) { return U(1, U'\0') + u32(std::to_string(n)) + U(1, U'\0'); }

Json gemma4_arguments(const U& args) {
  // Strings between <|"|> become placeholders.
  std::vector<U> strings;
  U text;
  size_t i = 0;
  while (i < args.size()) {
    size_t b = args.find(kGemmaQuote, i);
    size_t e = b == npos ? npos : args.find(kGemmaQuote, b + kGemmaQuote.size());
    if (e == npos) {
      text += args.substr(i);
      break;
    }
    text += args.substr(i, b - i);
    strings.push_back(args.substr(b + kGemmaQuote.size(), e - b - kGemmaQuote.size()));
    text += placeholder(strings.size() - 1);
    i = e + kGemmaQuote.size();
  }
  // Bare keys after { or , become quoted.
  U quoted;
  for (size_t k = 0; k < text.size();) {
    if (k > 0 && (text[k - 1] == '{' || text[k - 1] == ',') && py::is_word(text[k])) {
      size_t j = k;
      while (j < text.size() && py::is_word(text[j])) ++j;
      if (j < text.size() && text[j] == ':') {
        quoted += U"\"" + text.substr(k, j - k) + U"\":";
        k = j + 1;
        continue;
      }
    }
    quoted += text[k++];
  }
  for (size_t n = 0; n < strings.size(); ++n) {
    U mark = placeholder(n);
    U replacement = u32(python_dumps(Json(utf8(strings[n]))));
    size_t p = 0;
    while ((p = quoted.find(mark, p)) != npos) {
      quoted.replace(p, mark.size(), replacement);
      p += replacement.size();
    }
  }
  return py::json_loads(quoted);
}

Json parse_gemma4(const U& text, const Json&) {
  static const U kCall = U"call:";
  Json calls = Json::array();
  size_t pos = 0;
  for (;;) {
    size_t at = text.find(kCall, pos);
    if (at == npos) break;
    size_t j = at + kCall.size();
    while (j < text.size() && is_word_or_dash(text[j])) ++j;
    size_t end = j > at + kCall.size() ? gemma4_group(text, j) : npos;
    if (end == npos) {
      pos = at + 1;
      continue;
    }
    U name = text.substr(at + kCall.size(), j - at - kCall.size());
    calls.push_back(call(utf8(name), gemma4_arguments(text.substr(j, end - j))));
    pos = end;
  }
  if (calls.empty()) value_error("No function provided.");
  return one_or_list(std::move(calls));
}

// --- function_gemma ---------------------------------------------------------------------------

Json parse_function_gemma(const U& text, const Json&) {
  static const U kCall = U"call:";
  std::optional<std::pair<U, U>> match;
  for (size_t pos = 0; !match;) {
    size_t at = text.find(kCall, pos);
    if (at == npos) break;
    size_t j = at + kCall.size();
    while (j < text.size() && py::is_word(text[j])) ++j;
    if (j > at + kCall.size() && j < text.size() && text[j] == '{') {
      size_t close = text.find(U'}', j + 1);
      if (close != npos)
        match = std::make_pair(text.substr(at + kCall.size(), j - at - kCall.size()), text.substr(j + 1, close - j - 1));
    }
    pos = at + 1;
  }
  if (!match) value_error("No function provided.");
  U args = match->second;
  static const U kEscape = U"<escape>";
  Json arguments = Json::object();
  while (!args.empty()) {
    size_t split = args.find(U':');
    if (split == npos) value_error("substring not found");
    std::string key = utf8(args.substr(0, split));
    args = args.substr(split + 1);
    if (py::starts_with(args, kEscape)) {
      args = args.substr(kEscape.size());
      split = args.find(kEscape);
      if (split == npos) value_error("substring not found");
      arguments[key] = utf8(args.substr(0, split));
      size_t next = split + kEscape.size() + 1;
      args = next < args.size() ? args.substr(next) : U();
      continue;
    }
    split = args.find(U',');
    if (split == npos) split = args.size();
    U value = args.substr(0, split);
    args = split + 1 < args.size() ? args.substr(split + 1) : U();
    try {
      arguments[key] = py::json_loads(value);
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value) throw;
      arguments[key] = utf8(value);
    }
  }
  return call(utf8(match->first), std::move(arguments));
}

// --- pythonic ---------------------------------------------------------------------------------

std::optional<Json> pythonic_ast(const U& text) {
  size_t start = text.find(U'['), end = text.rfind(U']');
  if (start == npos || end == npos || end <= start) return std::nullopt;
  auto elts = py::parse_call_list(text.substr(start, end - start + 1));
  if (!elts || elts->empty()) return std::nullopt;
  Json calls = Json::array();
  bool any_none = false;
  for (const auto& c : *elts) {
    if (!c.is_call || c.positional || !c.name) {
      any_none = true;
      continue;
    }
    if (c.keyword_error) throw *c.keyword_error;
    if (c.star_kwargs) {
      any_none = true;
      continue;
    }
    Json args = Json::object();
    for (const auto& [k, v] : c.keywords) args[k] = v;
    calls.push_back(call(*c.name, std::move(args)));
  }
  if (any_none) return std::nullopt;
  return one_or_list(std::move(calls));
}

Json parse_pythonic(const U& text, const Json&) {
  try {
    if (auto parsed = pythonic_ast(text)) return *parsed;
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Value && e.kind != ErrorKind::Syntax) throw;
  }
  // _tool_call_regex.search: \[(?P<name>[\w.]+)\((?P<args>.*?)\)\]
  auto name_char = [](char32_t c) { return c == '.' || py::is_word(c); };
  std::optional<std::pair<U, U>> match;
  for (size_t i = 0; i < text.size() && !match; ++i) {
    if (text[i] != '[') continue;
    size_t j = i + 1;
    while (j < text.size() && name_char(text[j])) ++j;
    if (j == i + 1 || j >= text.size() || text[j] != '(') continue;
    size_t close = text.find(U")]", j + 1);
    if (close == npos) continue;
    match = std::make_pair(text.substr(i + 1, j - i - 1), text.substr(j + 1, close - j - 1));
  }
  if (!match) value_error("No function provided.");
  const U& args = match->second;
  Json arguments = Json::object();
  // _tool_args_regex.finditer over the arguments.
  size_t i = 0;
  while (i < args.size()) {
    auto try_at = [&](size_t b) -> std::optional<std::tuple<U, U, bool, size_t>> {
      size_t k = b;
      while (k < args.size() && py::is_word(args[k])) ++k;
      if (k == b || k >= args.size() || args[k] != '=') return std::nullopt;
      U key = args.substr(b, k - b);
      size_t v = k + 1;
      auto tail = [&](size_t p) -> std::optional<size_t> {  // (?:,\s*|$)
        if (p < args.size() && args[p] == ',') {
          ++p;
          while (p < args.size() && py::is_re_space(args[p])) ++p;
          return p;
        }
        if (at_dollar(args, p)) return p;
        return std::nullopt;
      };
      if (v < args.size() && (args[v] == '"' || args[v] == '\'')) {
        size_t close = args.find(args[v], v + 1);
        if (close != npos)
          if (auto e = tail(close + 1)) return std::make_tuple(key, args.substr(v + 1, close - v - 1), false, *e);
      }
      // (?P<bare>[^,]+) greedy, giving back until the tail matches.
      size_t stop = v;
      while (stop < args.size() && args[stop] != ',') ++stop;
      for (size_t e = stop; e > v; --e)
        if (auto t = tail(e)) return std::make_tuple(key, args.substr(v, e - v), true, *t);
      return std::nullopt;
    };
    auto m = try_at(i);
    if (!m) {
      ++i;
      continue;
    }
    auto [key, raw, bare, end] = *m;
    U value = bare ? py::strip(raw) : raw;
    Json v;
    try {
      v = py::literal_eval(value);
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value && e.kind != ErrorKind::Syntax) throw;
      v = utf8(value);
    }
    arguments[utf8(py::strip(key))] = std::move(v);
    i = end;
  }
  return call(utf8(match->first), std::move(arguments));
}

// --- glm47 (laguna) and longcat -----------------------------------------------------------------

/** <K>(.*?)</K>(?:\\n|\s)*<V>(.*?)</V>, finditer: the (key, value) pairs. */
std::vector<std::pair<U, U>> key_value_pairs(const U& text, const U& k_open, const U& k_close, const U& v_open,
                                             const U& v_close) {
  std::vector<std::pair<U, U>> out;
  size_t pos = 0;
  for (;;) {
    size_t k = text.find(k_open, pos);
    if (k == npos) break;
    bool matched = false;
    for (size_t e = text.find(k_close, k + k_open.size()); e != npos; e = text.find(k_close, e + 1)) {
      size_t p = e + k_close.size();
      for (;;) {
        if (p + 1 < text.size() && text[p] == '\\' && text[p + 1] == 'n') p += 2;
        else if (p < text.size() && py::is_re_space(text[p])) ++p;
        else break;
      }
      if (text.compare(p, v_open.size(), v_open) != 0) continue;
      size_t vb = p + v_open.size();
      size_t ve = text.find(v_close, vb);
      if (ve == npos) break;
      out.emplace_back(text.substr(k + k_open.size(), e - k - k_open.size()), text.substr(vb, ve - vb));
      pos = ve + v_close.size();
      matched = true;
      break;
    }
    if (!matched) pos = k + 1;
  }
  return out;
}

std::set<std::string> glm_string_args(const std::string& tool_name, const Json& tools) {
  std::set<std::string> out;
  if (tools.is_null()) return out;
  for (const Json& tool : tool_items(tools)) {
    const Json* func = get(tool, "function");
    if (!func || !py::truthy(*func)) continue;
    const Json* name = get(*func, "name");
    if (!name || *name != Json(tool_name)) continue;
    const Json* params = get(*func, "parameters");
    Json p = params && py::truthy(*params) ? *params : Json::object();
    const Json* props = get(p, "properties");
    Json pr = props && py::truthy(*props) ? *props : Json::object();
    if (!pr.is_object()) other_error("'properties' has no items()");
    for (auto it = pr.begin(); it != pr.end(); ++it) {
      const Json* type = get(it.value(), "type");
      if (type && *type == Json("string")) out.insert(it.key());
    }
    return out;
  }
  return out;
}

Json glm_normalize(const Json& arguments, const std::set<std::string>& string_args) {
  Json out = Json::object();
  for (auto it = arguments.begin(); it != arguments.end(); ++it) {
    const Json& value = it.value();
    if (string_args.count(it.key())) out[it.key()] = value.is_string() ? value : Json(py_str(value));
    else if (value.is_string()) out[it.key()] = deserialize(u32(value.get<std::string>()));
    else out[it.key()] = value;
  }
  return out;
}

std::optional<Json> glm_json_call(const U& text, const Json& tools) {
  Json parsed;
  try {
    parsed = py::json_loads(py::strip(text));
  } catch (const Error&) {
    return std::nullopt;
  }
  if (parsed.is_array() && !parsed.empty() && parsed[0].is_object()) parsed = Json(parsed[0]);
  if (!parsed.is_object()) return std::nullopt;
  Json name = nullptr, arguments = nullptr;
  auto val = [](const Json& o, const char* k) { auto it = o.find(k); return it == o.end() ? Json(nullptr) : *it; };
  if (parsed.contains("name") && parsed.contains("arguments")) {
    name = val(parsed, "name");
    arguments = val(parsed, "arguments");
  } else if (parsed.contains("function") && parsed.contains("arguments")) {
    name = val(parsed, "function");
    arguments = val(parsed, "arguments");
  } else if (parsed.contains("tool") && parsed["tool"].is_object()) {
    name = val(parsed["tool"], "name");
    arguments = val(parsed["tool"], "arguments");
  }
  if (name.is_object()) {
    if (!py::truthy(arguments)) arguments = val(name, "arguments");
    name = Json(val(name, "name"));
  }
  if (arguments.is_string()) arguments = deserialize(u32(arguments.get<std::string>()));
  std::set<std::string> string_args;
  if (name.is_string()) string_args = glm_string_args(name.get<std::string>(), tools);
  if (name.is_string() && arguments.is_null()) return call(name.get<std::string>(), Json::object());
  if (name.is_string() && arguments.is_object())
    return call(name.get<std::string>(), glm_normalize(arguments, string_args));
  return std::nullopt;
}

/** shlex.split(text) (POSIX mode, no comments). */
std::vector<U> shlex_split(const U& s) {
  std::vector<U> out;
  U cur;
  bool in_token = false;
  auto ws = [](char32_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  size_t i = 0;
  while (i < s.size()) {
    char32_t c = s[i];
    if (ws(c)) {
      if (in_token) out.push_back(cur);
      cur.clear();
      in_token = false;
      ++i;
    } else if (c == '\\') {
      if (i + 1 >= s.size()) value_error("No escaped character");
      cur += s[i + 1];
      in_token = true;
      i += 2;
    } else if (c == '\'' || c == '"') {
      in_token = true;
      ++i;
      for (;;) {
        if (i >= s.size()) value_error("No closing quotation");
        char32_t d = s[i];
        if (d == c) {
          ++i;
          break;
        }
        if (c == '"' && d == '\\') {
          if (i + 1 >= s.size()) value_error("No closing quotation");
          char32_t n = s[i + 1];
          if (n != '"' && n != '\\') cur += U'\\';
          cur += n;
          i += 2;
          continue;
        }
        cur += d;
        ++i;
      }
    } else {
      cur += c;
      in_token = true;
      ++i;
    }
  }
  if (in_token) out.push_back(cur);
  return out;
}

std::optional<Json> glm_key_values(const U& text, const std::set<std::string>& string_args) {
  if (text.find(U'=') == npos) return std::nullopt;
  std::vector<U> tokens;
  try {
    tokens = shlex_split(text);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (tokens.empty()) return std::nullopt;
  Json arguments = Json::object();
  for (const U& token : tokens) {
    size_t eq = token.find(U'=');
    if (eq == npos) return std::nullopt;
    U key = py::strip(token.substr(0, eq));
    U value = token.substr(eq + 1);
    if (key.empty()) return std::nullopt;
    std::string k = utf8(key);
    arguments[k] = string_args.count(k) ? Json(utf8(value)) : deserialize(value);
  }
  return arguments;
}

std::optional<Json> glm_plain_call(const U& text, const Json& tools) {
  U stripped = py::strip(text);
  if (stripped.empty()) return std::nullopt;
  size_t nl = stripped.find(U'\n');
  if (nl != npos) {
    U name = py::strip(stripped.substr(0, nl)), rest = py::strip(stripped.substr(nl + 1));
    if (!name.empty() && !rest.empty()) {
      auto string_args = glm_string_args(utf8(name), tools);
      Json arguments = deserialize(rest);
      if (arguments.is_object()) return call(utf8(name), glm_normalize(arguments, string_args));
    }
  }
  size_t sp = stripped.find(U' ');
  U name = sp == npos ? stripped : stripped.substr(0, sp);
  U rest = sp == npos ? U() : py::strip(stripped.substr(sp + 1));
  if (name.empty()) return std::nullopt;
  if (rest.empty()) return call(utf8(name), Json::object());
  auto string_args = glm_string_args(utf8(name), tools);
  Json arguments = deserialize(rest);
  if (arguments.is_object()) return call(utf8(name), glm_normalize(arguments, string_args));
  if (auto kv = glm_key_values(rest, string_args)) return call(utf8(name), *kv);
  Json raw = Json::object();
  raw["raw"] = utf8(rest);
  return call(utf8(name), raw);
}

Json parse_glm47(const U& text, const Json& tools) {
  static const U kKey = U"<arg_key>";
  size_t at = text.find(kKey);
  if (at == npos) {
    if (auto c = glm_json_call(text, tools)) return *c;
    if (auto c = glm_plain_call(text, tools)) return *c;
    Json raw = Json::object();
    raw["raw"] = utf8(py::strip(text));
    return call("unknown", raw);
  }
  std::string func_name = utf8(py::strip(text.substr(0, at)));
  auto string_args = glm_string_args(func_name, tools);
  Json args = Json::object();
  for (auto& [k, v] : key_value_pairs(text, kKey, U"</arg_key>", U"<arg_value>", U"</arg_value>")) {
    std::string key = utf8(py::strip(k));
    U val = py::strip(v);
    args[key] = string_args.count(key) ? Json(utf8(val)) : deserialize(val);
  }
  return call(func_name, std::move(args));
}

bool longcat_is_string(const std::string& tool_name, const std::string& arg, const Json& tools) {
  if (tools.is_null()) return false;
  for (const Json& tool : tool_items(tools)) {
    if (!tool.is_object() || !tool.contains("function")) other_error("KeyError: 'function'");
    const Json& func = tool["function"];
    if (!func.is_object() || !func.contains("name")) other_error("KeyError: 'name'");
    if (func["name"] != Json(tool_name)) continue;
    if (!func.contains("parameters")) other_error("KeyError: 'parameters'");
    const Json& params = func["parameters"];
    if (params.is_null()) return false;
    const Json* props = get(params, "properties");
    Json p = props ? *props : Json::object();
    const Json* a = get(p, arg.c_str());
    Json aj = a ? *a : Json::object();
    const Json* type = get(aj, "type");
    return type && *type == Json("string");
  }
  return false;
}

Json parse_longcat(const U& input, const Json& tools) {
  U text = py::strip(input);
  if (py::starts_with(text, U"{")) {
    try {
      return py::json_loads(text);
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value) throw;
    }
  }
  static const U kKey = U"<longcat_arg_key>";
  size_t at = text.find(kKey);
  if (at == npos) other_error("'NoneType' object has no attribute 'group'");
  std::string func_name = utf8(py::strip(text.substr(0, at)));
  Json args = Json::object();
  for (auto& [k, v] : key_value_pairs(text, kKey, U"</longcat_arg_key>", U"<longcat_arg_value>",
                                      U"</longcat_arg_value>")) {
    std::string key = utf8(py::strip(k));
    U val = py::strip(v);
    args[key] = longcat_is_string(func_name, key, tools) ? Json(utf8(val)) : deserialize(val);
  }
  return call(func_name, std::move(args));
}

// --- kimi_k2 ----------------------------------------------------------------------------------

Json kimi_k2_single(const U& text) {
  static const U kArg = U"<|tool_call_argument_begin|>", kFunctions = U"functions.";
  // ^\s*((?:functions\.)?(.+?):\d+)\s*<\|tool_call_argument_begin\|>, with its backtracking.
  size_t ws = 0;
  while (ws < text.size() && py::is_re_space(text[ws])) ++ws;
  std::optional<std::pair<U, U>> found;
  for (size_t w = ws + 1; w-- > 0 && !found;) {
    for (int with_prefix = 1; with_prefix >= 0 && !found; --with_prefix) {
      size_t start = w;
      if (with_prefix) {
        if (text.compare(w, kFunctions.size(), kFunctions) != 0) continue;
        start += kFunctions.size();
      }
      for (size_t colon = text.find(U':', start + 1); colon != npos && !found; colon = text.find(U':', colon + 1)) {
        size_t d = colon + 1;
        while (d < text.size() && py::is_digit(text[d])) ++d;
        if (d == colon + 1) continue;
        size_t p = d;
        while (p < text.size() && py::is_re_space(text[p])) ++p;
        if (text.compare(p, kArg.size(), kArg) != 0) continue;
        found = std::make_pair(text.substr(w, d - w), text.substr(start, colon - start));
      }
    }
  }
  if (!found) value_error("No tool call found.");
  size_t a = text.find(kArg);
  if (a == npos) value_error("No tool call arguments found.");
  size_t b = a + kArg.size();
  while (b < text.size() && py::is_re_space(text[b])) ++b;
  Json c = Json::object();
  c["id"] = utf8(found->first);
  c["name"] = utf8(found->second);
  c["arguments"] = deserialize(text.substr(b));
  return c;
}

Json parse_kimi_k2(const U& text, const Json&) {
  static const U kBegin = U"<|tool_call_begin|>", kEnd = U"<|tool_call_end|>";
  std::vector<U> matches;
  size_t pos = 0;
  for (;;) {
    size_t b = text.find(kBegin, pos);
    if (b == npos) break;
    size_t e = text.find(kEnd, b + kBegin.size());
    if (e == npos) break;
    matches.push_back(text.substr(b + kBegin.size(), e - b - kBegin.size()));
    pos = e + kEnd.size();
  }
  Json calls = Json::array();
  if (matches.empty()) matches.push_back(text);
  for (const U& m : matches) calls.push_back(kimi_k2_single(m));
  return calls;
}

// --- kimi_k3 ----------------------------------------------------------------------------------

const U kSep = U"<|sep|>";

/** <|open|>TAG(attrs without <|sep|>)<|sep|>(body.*?)<|close|>TAG<|sep|>, finditer. */
std::vector<std::pair<U, U>> xtml_blocks(const U& text, const U& tag) {
  const U open = U"<|open|>" + tag, close = U"<|close|>" + tag + kSep;
  std::vector<std::pair<U, U>> out;
  size_t pos = 0;
  for (;;) {
    size_t o = text.find(open, pos);
    if (o == npos) break;
    size_t a = o + open.size();
    size_t s = text.find(kSep, a);
    size_t c = s == npos ? npos : text.find(close, s + kSep.size());
    if (c == npos) {
      pos = o + 1;
      continue;
    }
    out.emplace_back(text.substr(a, s - a), text.substr(s + kSep.size(), c - s - kSep.size()));
    pos = c + close.size();
  }
  return out;
}

std::map<std::string, std::string> xtml_attrs(const U& text, std::vector<std::string>* order = nullptr) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && py::is_word(text[j])) ++j;
    size_t close = j > i && j + 1 < text.size() && text[j] == '=' && text[j + 1] == '"' ? text.find(U'"', j + 2) : npos;
    if (close == npos) {
      ++i;
      continue;
    }
    std::string v = utf8(text.substr(j + 2, close - j - 2));
    auto replace_all = [](std::string s, const std::string& from, const std::string& to) {
      for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
      return s;
    };
    v = replace_all(replace_all(v, "&quot;", "\""), "&amp;", "&");
    std::string key = utf8(text.substr(i, j - i));
    if (order && !out.count(key)) order->push_back(key);
    out[key] = v;
    i = close + 1;
  }
  return out;
}

Json parse_kimi_k3(const U& text, const Json&) {
  Json calls = Json::array();
  for (auto& [attrs_text, body] : xtml_blocks(text, U"call")) {
    try {
      auto attrs = xtml_attrs(attrs_text);
      auto it = attrs.find("tool");
      if (it == attrs.end() || it->second.empty()) value_error("Kimi K3 tool call is missing the tool name attribute.");
      Json arguments;
      auto json_blocks = xtml_blocks(body, U"json");
      // _json_regex.search: the first json block, whose attributes may not hold <|sep|>.
      if (!json_blocks.empty()) {
        arguments = py::json_loads(json_blocks[0].second);
        if (!arguments.is_object()) value_error("Kimi K3 tool call JSON block must be an object.");
      } else {
        arguments = Json::object();
        for (auto& [arg_attrs_text, value] : xtml_blocks(body, U"argument")) {
          auto arg_attrs = xtml_attrs(arg_attrs_text);
          auto key = arg_attrs.find("key");
          if (key == arg_attrs.end()) value_error("Kimi K3 tool argument is missing its key.");
          auto type = arg_attrs.find("type");
          std::string t = type == arg_attrs.end() ? "string" : type->second;
          if (t == "string") {
            arguments[key->second] = utf8(value);
          } else {
            try {
              arguments[key->second] = py::json_loads(value);
            } catch (const Error& e) {
              if (e.kind != ErrorKind::Value) throw;
              arguments[key->second] = utf8(value);
            }
          }
        }
      }
      calls.push_back(call(it->second, std::move(arguments)));
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value) throw;
    }
  }
  if (calls.empty()) value_error("No tool call found.");
  return calls;
}

// --- minimax_m2 and minicpm5 ------------------------------------------------------------------

std::string extract_name(const U& raw) {
  U s = py::strip(raw);
  if ((py::starts_with(s, U"\"") && py::ends_with(s, U"\"")) || (py::starts_with(s, U"'") && py::ends_with(s, U"'")))
    return utf8(s.size() >= 2 ? s.substr(1, s.size() - 2) : U());
  return utf8(s);
}

void schema_types(const Json& schema, std::set<std::string>& types) {
  if (!schema.is_object()) {
    types.insert("string");
    return;
  }
  std::set<std::string> own;
  if (auto it = schema.find("type"); it != schema.end()) {
    if (it->is_string()) own.insert(it->get<std::string>());
    else if (it->is_array())
      for (const auto& t : *it)
        if (t.is_string()) own.insert(t.get<std::string>());
  }
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array() && !it->empty()) {
    for (const auto& v : *it) {
      if (v.is_null()) own.insert("null");
      else if (v.is_boolean()) own.insert("boolean");
      else if (v.is_number_integer()) own.insert("integer");
      else if (v.is_number_float()) own.insert("number");
      else if (v.is_string()) own.insert("string");
      else if (v.is_array()) own.insert("array");
      else if (v.is_object()) own.insert("object");
    }
  }
  for (const char* field : {"anyOf", "oneOf", "allOf"}) {
    if (auto it = schema.find(field); it != schema.end() && it->is_array())
      for (const auto& choice : *it) schema_types(choice, own);
  }
  if (own.empty()) own.insert("string");
  types.insert(own.begin(), own.end());
}

std::set<std::string> param_types(const std::string& name, const Json& config) {
  std::set<std::string> types;
  auto it = config.find(name);
  if (it == config.end()) return {"string"};
  if (it->is_null()) return {"string"};
  schema_types(*it, types);
  return types;
}

Json convert_with_types(const U& value, const std::set<std::string>& param_types_raw) {
  U lower = py::lower_ascii(value);
  if (lower == U"null") return nullptr;
  std::set<std::string> types;
  for (const auto& t : param_types_raw) types.insert(utf8(py::lower_ascii(u32(t))));
  if (types.count("null") && (lower == U"null" || lower == U"none" || lower == U"nil")) return nullptr;
  for (const char* t : {"integer", "int", "number", "float", "boolean", "bool", "object", "array", "string", "str",
                        "text"}) {
    std::string type = t;
    if (!types.count(type)) continue;
    if (type == "string" || type == "str" || type == "text") return utf8(value);
    try {
      if (type == "integer" || type == "int") return py::py_int(value);
      if (type == "number" || type == "float") {
        double f = py::py_float(value);
        Json i = py::int_of_float(f);
        return f != std::trunc(f) ? Json(f) : i;
      }
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value && e.kind != ErrorKind::Type) throw;
      continue;
    }
    if (type == "boolean" || type == "bool") {
      U l = py::strip(lower);
      if (l == U"true" || l == U"1" || l == U"yes" || l == U"on") return true;
      if (l == U"false" || l == U"0" || l == U"no" || l == U"off") return false;
      continue;
    }
    // object / array
    try {
      return py::json_loads(value, false);
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value) throw;
    }
    try {
      return py::literal_eval(value);
    } catch (const Error& e) {
      if (e.kind != ErrorKind::Value && e.kind != ErrorKind::Syntax) throw;
      continue;
    }
  }
  try {
    return py::json_loads(value);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Value) throw;
    return utf8(value);
  }
}

std::map<std::string, Json> param_config_for(const Json& tools) {
  std::map<std::string, Json> out;
  if (tools.is_null()) return out;
  for (const Json& tool : tool_items(tools)) {
    const Json* func = get(tool, "function");
    if (!func || !py::truthy(*func)) continue;
    const Json* params = get(*func, "parameters");
    if (!params || !py::truthy(*params)) continue;
    if (!func->contains("name")) other_error("KeyError: 'name'");
    const Json& name = (*func)["name"];
    const Json* props = get(*params, "properties");
    if (name.is_string()) out[name.get<std::string>()] = props ? *props : Json::object();
  }
  return out;
}

std::vector<U> lazy_blocks(const U& text, const U& open, const U& close) {
  std::vector<U> out;
  size_t pos = 0;
  for (;;) {
    size_t b = text.find(open, pos);
    if (b == npos) break;
    size_t e = text.find(close, b + open.size());
    if (e == npos) break;
    out.push_back(text.substr(b + open.size(), e - b - open.size()));
    pos = e + close.size();
  }
  return out;
}

Json parse_minimax_m2(const U& text, const Json& tools) {
  auto invokes = lazy_blocks(text, U"<invoke name=", U"</invoke>");
  if (invokes.empty()) value_error("No tool call found");
  auto configs = param_config_for(tools);
  Json calls = Json::array();
  for (const U& invoke : invokes) {
    size_t gt = invoke.find(U'>');
    size_t name_end = gt == npos ? invoke.size() : gt;
    if (name_end == 0) continue;
    std::string function_name = extract_name(invoke.substr(0, name_end));
    auto cfg = configs.find(function_name);
    Json config = cfg == configs.end() ? Json::object() : cfg->second;
    Json args = Json::object();
    for (const U& m : lazy_blocks(invoke, U"<parameter name=", U"</parameter>")) {
      size_t p = m.find(U'>');
      if (p == npos || p == 0) continue;
      std::string param_name = extract_name(m.substr(0, p));
      U value = py::strip(m.substr(p + 1));
      if (!value.empty() && value.front() == '\n') value.erase(0, 1);
      if (!value.empty() && value.back() == '\n') value.pop_back();
      if (!config.is_object()) other_error("'properties' is not a dict");
      args[param_name] = convert_with_types(value, param_types(param_name, config));
    }
    calls.push_back(call(function_name, std::move(args)));
  }
  return one_or_list(std::move(calls));
}

/** minicpm5's name alternatives: "..." | '...' | [^\s"'<>]+ at i; the end, or npos. */
size_t minicpm_name(const U& s, size_t i) {
  if (i >= s.size()) return npos;
  if (s[i] == '"' || s[i] == '\'') {
    size_t c = s.find(s[i], i + 1);
    return c == npos ? npos : c + 1;
  }
  size_t j = i;
  while (j < s.size() && !py::is_re_space(s[j]) && s[j] != '"' && s[j] != '\'' && s[j] != '<' && s[j] != '>') ++j;
  return j > i ? j : npos;
}

/** \s*> after a name: the position after '>', or npos. */
size_t space_then_gt(const U& s, size_t i) {
  while (i < s.size() && py::is_re_space(s[i])) ++i;
  return i < s.size() && s[i] == '>' ? i + 1 : npos;
}

/** name\s*=\s* at i: where the name starts, or npos. */
size_t name_equals(const U& s, size_t i) {
  if (s.compare(i, 4, U"name") != 0) return npos;
  i += 4;
  while (i < s.size() && py::is_re_space(s[i])) ++i;
  if (i >= s.size() || s[i] != '=') return npos;
  ++i;
  while (i < s.size() && py::is_re_space(s[i])) ++i;
  return i;
}

U minicpm_value(const U& raw) {
  // ^\s*<!\[CDATA\[(.*?)\]\]>\s*$
  size_t i = 0;
  while (i < raw.size() && py::is_re_space(raw[i])) ++i;
  static const U kOpen = U"<![CDATA[", kClose = U"]]>";
  if (raw.compare(i, kOpen.size(), kOpen) == 0) {
    size_t b = i + kOpen.size();
    for (size_t c = raw.find(kClose, b); c != npos; c = raw.find(kClose, c + 1)) {
      size_t k = c + kClose.size();
      while (k < raw.size() && py::is_re_space(raw[k])) ++k;
      if (at_dollar(raw, k)) return raw.substr(b, c - b);
    }
  }
  return py::strip(raw);
}

Json parse_minicpm5(const U& text, const Json& tools) {
  struct Fn {
    U name, body;
  };
  std::vector<Fn> fns;
  static const U kFunction = U"<function", kClose = U"</function>";
  size_t pos = 0;
  while (pos <= text.size()) {
    std::optional<std::pair<Fn, size_t>> m;
    for (size_t i = pos; i <= text.size() && !m; ++i) {
      // (?:<function\s+)? (?:name\s*=\s*)? NAME \s*> BODY (?:</function>|$), optional parts tried
      // with, then without.
      std::vector<size_t> after_a;
      if (text.compare(i, kFunction.size(), kFunction) == 0) {
        size_t j = i + kFunction.size(), k = j;
        while (k < text.size() && py::is_re_space(text[k])) ++k;
        if (k > j) after_a.push_back(k);
      }
      after_a.push_back(i);
      for (size_t a : after_a) {
        if (m) break;
        for (size_t name_start : {name_equals(text, a), a}) {
          if (name_start == npos || m) continue;
          size_t name_end = minicpm_name(text, name_start);
          if (name_end == npos) continue;
          size_t body = space_then_gt(text, name_end);
          if (body == npos) continue;
          for (size_t j = body;; ++j) {
            bool close = text.compare(j, kClose.size(), kClose) == 0;
            if (close || at_dollar(text, j)) {
              m = std::make_pair(Fn{text.substr(name_start, name_end - name_start), text.substr(body, j - body)},
                                 close ? j + kClose.size() : j);
              break;
            }
          }
        }
      }
    }
    if (!m) break;
    fns.push_back(m->first);
    pos = m->second;
  }
  if (fns.empty()) value_error("No function provided.");
  auto configs = param_config_for(tools);
  Json calls = Json::array();
  static const U kParam = U"<param", kParamClose = U"</param>";
  for (const Fn& fn : fns) {
    std::string function_name = extract_name(fn.name);
    auto cfg = configs.find(function_name);
    Json config = cfg == configs.end() ? Json::object() : cfg->second;
    Json args = Json::object();
    const U& body = fn.body;
    size_t p = 0;
    while (p < body.size()) {
      size_t at = body.find(kParam, p);
      if (at == npos) break;
      size_t j = at + kParam.size(), k = j;
      while (k < body.size() && py::is_re_space(body[k])) ++k;
      size_t ns = k > j ? name_equals(body, k) : npos;
      size_t ne = ns == npos ? npos : minicpm_name(body, ns);
      size_t vb = ne == npos ? npos : space_then_gt(body, ne);
      size_t ve = vb == npos ? npos : body.find(kParamClose, vb);
      if (ve == npos) {
        p = at + 1;
        continue;
      }
      std::string param_name = extract_name(body.substr(ns, ne - ns));
      if (!config.is_object()) other_error("'properties' is not a dict");
      args[param_name] = convert_with_types(minicpm_value(body.substr(vb, ve - vb)), param_types(param_name, config));
      p = ve + kParamClose.size();
    }
    calls.push_back(call(function_name, std::move(args)));
  }
  return one_or_list(std::move(calls));
}

// --- muse_spark -------------------------------------------------------------------------------

bool boundary_after_tag(const U& s, size_t i) { return i >= s.size() || !py::is_word(s[i]); }

/** The tag's `[^>]*?\bname="([^"]+)"` candidates after position a, in the regex's order: for each,
 * (name start, name end). */
std::vector<std::pair<size_t, size_t>> name_attrs(const U& s, size_t a) {
  std::vector<std::pair<size_t, size_t>> out;
  static const U kName = U"name=\"";
  for (size_t p = a; p < s.size() && s[p] != '>'; ++p) {
    if (s.compare(p, kName.size(), kName) != 0) continue;
    if (p > 0 && py::is_word(s[p - 1])) continue;  // \b before the n
    size_t b = p + kName.size();
    size_t e = s.find(U'"', b);
    if (e == npos || e == b) continue;
    out.emplace_back(b, e);
  }
  return out;
}

Json muse_value(const U& raw) {
  try {
    return py::json_loads(raw);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Value) throw;
    return utf8(py::strip(raw));
  }
}

Json parse_muse_spark(const U& text, const Json&) {
  static const U kInvoke = U"<atem:invoke", kInvokeClose = U"</atem:invoke>", kParam = U"<atem:parameter",
                 kParamClose = U"</atem:parameter>";
  Json calls = Json::array();
  size_t pos = 0;
  for (;;) {
    size_t at = text.find(kInvoke, pos);
    if (at == npos) break;
    size_t a = at + kInvoke.size();
    std::optional<std::pair<U, size_t>> head;  // name, body start
    if (boundary_after_tag(text, a)) {
      for (auto [b, e] : name_attrs(text, a)) {
        if (e + 1 < text.size() && text[e + 1] == '>') {
          head = std::make_pair(text.substr(b, e - b), e + 2);
          break;
        }
      }
    }
    if (!head) {
      pos = at + 1;
      continue;
    }
    // (?:<atem:parameter\b.*?</atem:parameter>|.)*? then (?:</atem:invoke>|$)
    size_t j = head->second, body_end, match_end;
    for (;;) {
      if (text.compare(j, kInvokeClose.size(), kInvokeClose) == 0) {
        body_end = j;
        match_end = j + kInvokeClose.size();
        break;
      }
      if (at_dollar(text, j)) {
        body_end = match_end = j;
        break;
      }
      if (text.compare(j, kParam.size(), kParam) == 0 && boundary_after_tag(text, j + kParam.size())) {
        size_t c = text.find(kParamClose, j + kParam.size());
        if (c != npos) {
          j = c + kParamClose.size();
          continue;
        }
      }
      ++j;
    }
    U body = text.substr(head->second, body_end - head->second);
    Json arguments = Json::object();
    size_t p = 0;
    for (;;) {
      size_t pa = body.find(kParam, p);
      if (pa == npos) break;
      size_t after = pa + kParam.size();
      bool found = false;
      if (boundary_after_tag(body, after)) {
        for (auto [b, e] : name_attrs(body, after)) {
          size_t gt = body.find(U'>', e + 1);
          if (gt == npos) continue;
          size_t c = body.find(kParamClose, gt + 1);
          if (c == npos) continue;
          arguments[utf8(body.substr(b, e - b))] = muse_value(body.substr(gt + 1, c - gt - 1));
          p = c + kParamClose.size();
          found = true;
          break;
        }
      }
      if (!found) p = pa + 1;
    }
    calls.push_back(call(utf8(head->first), std::move(arguments)));
    pos = match_end > at ? match_end : at + 1;
  }
  if (calls.empty()) value_error("No function provided.");
  return one_or_list(std::move(calls));
}

const Format kFormats[] = {
    {"json_tools", "<tool_call>", "</tool_call>", parse_json_tools},
    {"qwen3_coder", "<tool_call>", "</tool_call>", parse_qwen3_coder},
    {"mistral", "[TOOL_CALLS]", "", parse_mistral},
    {"gemma4", "<|tool_call>", "<tool_call|>", parse_gemma4},
    {"function_gemma", "<start_function_call>", "<end_function_call>", parse_function_gemma},
    {"pythonic", "<|tool_call_start|>", "<|tool_call_end|>", parse_pythonic},
    {"glm47", "<tool_call>", "</tool_call>", parse_glm47},
    {"laguna", "<tool_call>", "</tool_call>", parse_glm47},
    {"kimi_k2", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", parse_kimi_k2},
    {"kimi_k3", "<|open|>tools<|sep|>", "<|close|>tools<|sep|>", parse_kimi_k3},
    {"minimax_m2", "<minimax:tool_call>", "</minimax:tool_call>", parse_minimax_m2},
    {"minicpm5", "<function name=", "</function>", parse_minicpm5},
    {"longcat", "<longcat_tool_call>", "</longcat_tool_call>", parse_longcat},
    {"muse_spark", "<atem:function_calls>", "</atem:function_calls>", parse_muse_spark},
};

}  // namespace

const Format* find_format(const std::string& type) {
  for (const auto& f : kFormats)
    if (type == f.type) return &f;
  return nullptr;
}

}  // namespace mlxrt::server::tool_parsers
