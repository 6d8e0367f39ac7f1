// Python string formatting as templates use it: `"%s" % x`, the `format` filter, and str.format.
#include <cmath>
#include <cstdio>

#include "mlxrt/template/interpreter.h"
#include "mlxrt/template/text.h"

namespace mlxrt::tmpl::detail {

namespace {

struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int width = -1;
  int precision = -1;
  char type = 0;
};

std::string pad(const std::string& s, const Spec& sp, char default_align) {
  auto len = static_cast<int>(utf8_length(s));
  if (sp.width <= len) return s;
  int n = sp.width - len;
  char align = sp.align ? sp.align : default_align;
  std::string fill(1, sp.fill);
  auto rep = [&](int k) {
    std::string r;
    for (int i = 0; i < k; ++i) r += fill;
    return r;
  };
  if (align == '<') return s + rep(n);
  if (align == '^') return rep(n / 2) + s + rep(n - n / 2);
  if (align == '=' && !s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) return s.substr(0, 1) + rep(n) + s.substr(1);
  return rep(n) + s;
}

/** A number formatted with a printf conversion (f, e, g, d, x, o) and Python's sign flag. */
std::string number(const Value& v, char type, int precision, char sign, bool alt) {
  require_defined(v);
  if (!v.is_number()) throw OpError("format requires a number, not " + type_name(v));
  char buf[512];
  std::string flags = "%";
  if (sign == '+') flags += "+";
  else if (sign == ' ') flags += " ";
  if (alt) flags += "#";
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b') {
    std::int64_t i = v.is_float() ? static_cast<std::int64_t>(v.as_double()) : v.as_int();
    if (type == 'b') {
      std::string bits;
      std::uint64_t u = i < 0 ? static_cast<std::uint64_t>(-i) : static_cast<std::uint64_t>(i);
      do {
        bits.insert(bits.begin(), static_cast<char>('0' + (u & 1)));
        u >>= 1;
      } while (u);
      return (i < 0 ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "") + std::string(alt ? "0b" : "") + bits;
    }
    std::string f = flags + "ll" + std::string(1, type == 'd' ? 'd' : type);
    std::snprintf(buf, sizeof buf, f.c_str(), static_cast<long long>(i));
    return buf;
  }
  double d = v.as_double();
  if (std::isinf(d) || std::isnan(d)) {
    std::string s = std::isnan(d) ? "nan" : "inf";
    if (type == 'F' || type == 'E' || type == 'G') for (auto& c : s) c = static_cast<char>(std::toupper(c));
    if (d < 0) return "-" + s;
    return (sign == '+' ? "+" : sign == ' ' ? " " : "") + s;
  }
  std::string f = flags + "." + std::to_string(precision < 0 ? 6 : precision) + std::string(1, type);
  std::snprintf(buf, sizeof buf, f.c_str(), d);
  return buf;
}

/** The format-spec mini-language of str.format. */
Spec parse_spec(const std::string& s) {
  Spec sp;
  std::size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    sp.fill = s[0];
    sp.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) sp.sign = s[i++];
  if (i < s.size() && s[i] == '#') sp.alt = true, ++i;
  if (i < s.size() && s[i] == '0') sp.zero = true, ++i;
  int w = 0;
  bool has_w = false;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) w = std::min(w * 10 + (s[i++] - '0'), 100000), has_w = true;
  if (has_w) sp.width = w;
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) throw OpError("thousands separators in format specs are not supported");
  if (i < s.size() && s[i] == '.') {
    ++i;
    int p = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) p = std::min(p * 10 + (s[i++] - '0'), 1000);
    sp.precision = p;
  }
  if (i < s.size()) sp.type = s[i++];
  if (i != s.size()) throw OpError("Invalid format specifier '" + s + "'");
  if (sp.zero && !sp.align) sp.fill = '0', sp.align = '=';
  return sp;
}

std::string format_value(const Value& v, const std::string& spec_text) {
  Spec sp = parse_spec(spec_text);
  if (sp.type == 0 && !v.is_number()) {
    std::string s = to_str(v);
    if (sp.precision >= 0) s = utf8_encode(utf8_decode(s).substr(0, static_cast<std::size_t>(sp.precision)));
    return pad(s, sp, '<');
  }
  if (sp.type == 's') {
    if (!v.is_string()) throw OpError("Unknown format code 's' for object of type '" + type_name(v) + "'");
    std::string s = v.str();
    if (sp.precision >= 0) s = utf8_encode(utf8_decode(s).substr(0, static_cast<std::size_t>(sp.precision)));
    return pad(s, sp, '<');
  }
  std::string out;
  char t = sp.type;
  if (t == 0) {
    if (v.is_float()) {
      if (sp.precision < 0) out = float_repr(v.as_double());
      else out = number(v, 'g', sp.precision, sp.sign, sp.alt);
      if (sp.sign == '+' && v.as_double() >= 0 && out[0] != '+') out = "+" + out;
    } else {
      out = number(v.is_bool() ? Value(v.as_int()) : v, 'd', -1, sp.sign, sp.alt);
    }
  } else if (t == 'd' || t == 'x' || t == 'X' || t == 'o' || t == 'b') {
    if (v.is_float()) throw OpError(std::string("Unknown format code '") + t + "' for object of type 'float'");
    out = number(v, t, -1, sp.sign, sp.alt);
  } else if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G') {
    out = number(v, t, sp.precision, sp.sign, sp.alt);
  } else if (t == '%') {
    out = number(Value(v.as_double() * 100), 'f', sp.precision, sp.sign, sp.alt) + "%";
  } else {
    throw OpError(std::string("Unknown format code '") + t + "'");
  }
  return pad(out, sp, '>');
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  if (args.is_list() && args.list().is_tuple) positional = args.list().items;
  else if (args.is_dict()) mapping = &args.dict(), positional.push_back(args);
  else positional.push_back(args);
  std::size_t next = 0;
  bool used_mapping = false;
  std::string out;
  auto take = [&]() -> const Value& {
    if (next >= positional.size()) throw OpError("not enough arguments for format string");
    return positional[next++];
  };
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) throw OpError("incomplete format");
    const Value* key_value = nullptr;
    if (fmt[i] == '(') {
      std::size_t close = fmt.find(')', i);
      if (close == std::string::npos) throw OpError("incomplete format key");
      if (!mapping) throw OpError("format requires a mapping");
      key_value = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!key_value) throw OpError("KeyError: " + fmt.substr(i + 1, close - i - 1));
      used_mapping = true;
      i = close + 1;
    }
    Spec sp;
    sp.align = '>';
    for (; i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos; ++i) {
      if (fmt[i] == '-') sp.align = '<';
      else if (fmt[i] == '+' || fmt[i] == ' ') sp.sign = sp.sign == '+' ? '+' : fmt[i];
      else if (fmt[i] == '#') sp.alt = true;
      else sp.zero = true;
    }
    int w = -1;
    if (i < fmt.size() && fmt[i] == '*') {
      w = static_cast<int>(take().as_int());
      ++i;
    } else {
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) w = std::min((w < 0 ? 0 : w) * 10 + (fmt[i++] - '0'), 100000);
    }
    sp.width = w;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      int p = 0;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) p = std::min(p * 10 + (fmt[i++] - '0'), 1000);
      sp.precision = p;
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) throw OpError("incomplete format");
    char t = fmt[i];
    if (t == '%') {
      out.push_back('%');
      continue;
    }
    const Value& v = key_value ? *key_value : take();
    std::string piece;
    switch (t) {
      case 's': piece = to_str(v); if (sp.precision >= 0) piece = utf8_encode(utf8_decode(piece).substr(0, sp.precision)); break;
      case 'r':
      case 'a': piece = repr(v); break;
      case 'd':
      case 'i':
      case 'u':
        if (!v.is_number()) throw OpError("%d format: a real number is required, not " + type_name(v));
        piece = number(v.is_float() ? Value(static_cast<std::int64_t>(v.as_double())) : v, 'd', -1, sp.sign, false);
        break;
      case 'x': case 'X': case 'o': piece = number(v, t, -1, sp.sign, sp.alt); break;
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': piece = number(v, t, sp.precision, sp.sign, sp.alt); break;
      case 'c':
        if (v.is_string()) piece = v.str();
        else utf8_append(piece, static_cast<char32_t>(v.as_int()));
        break;
      default: throw OpError(std::string("unsupported format character '") + t + "'");
    }
    if (sp.zero && sp.align == '>' && t != 's' && t != 'r' && t != 'c') sp.fill = '0', sp.align = '=';
    out += pad(piece, sp, '>');
  }
  if (!used_mapping && next < positional.size() && !mapping)
    throw OpError("not all arguments converted during string formatting");
  return out;
}

std::string str_format(Interpreter& in, const std::string& fmt, const CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      throw OpError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw OpError("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    if (auto p = field.find(':'); p != std::string::npos) spec = field.substr(p + 1), field = field.substr(0, p);
    if (auto p = field.find('!'); p != std::string::npos) conv = field.substr(p + 1), field = field.substr(0, p);
    std::size_t name_end = field.find_first_of(".[");
    std::string name = field.substr(0, name_end);
    Value v;
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
      std::size_t idx = name.empty() ? auto_index++ : static_cast<std::size_t>(parse_index(name));
      if (idx >= args.positional.size()) throw OpError("Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      v = args.positional[idx];
    } else {
      const Value* kv = arg(args, static_cast<std::size_t>(-1), name.c_str());
      if (!kv) throw OpError("KeyError: '" + name + "'");
      v = *kv;
    }
    for (std::size_t p = name_end; p != std::string::npos && p < field.size();) {
      if (field[p] == '.') {
        std::size_t e = field.find_first_of(".[", p + 1);
        v = in.getattr(v, field.substr(p + 1, e == std::string::npos ? std::string::npos : e - p - 1));
        p = e;
      } else {
        std::size_t e = field.find(']', p);
        if (e == std::string::npos) throw OpError("Missing ']' in format string");
        std::string key = field.substr(p + 1, e - p - 1);
        bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        v = in.getitem(v, digits ? Value(static_cast<std::int64_t>(parse_index(key))) : Value(key));
        p = e + 1;
      }
    }
    if (conv == "r" || conv == "a") v = Value(repr(v));
    else if (conv == "s") v = Value(to_str(v));
    else if (!conv.empty()) throw OpError("Unknown conversion specifier " + conv);
    out += format_value(v, spec);
  }
  return out;
}

}  // namespace mlxrt::tmpl::detail
