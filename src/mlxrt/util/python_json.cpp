// Python's json.dumps byte layout, so responses match mlx_lm.server's byte for byte.
#include "mlxrt/util/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace mlxrt::util {

namespace {

void append_u16(std::string& out, uint32_t unit) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\u%04x", unit);
  out += buf;
}

/** Decodes one UTF-8 sequence at s[i] (advancing i); malformed bytes decode as U+FFFD, which is
 * what the text of a Python str holding them would have become. */
uint32_t next_code_point(const std::string& s, size_t& i) {
  auto b0 = static_cast<unsigned char>(s[i]);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < len; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b >> 6) != 0x2) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += len;
  return cp;
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7F)) append_u16(out, c);
          else out += static_cast<char>(c);
      }
      continue;
    }
    size_t start = i;
    uint32_t cp = next_code_point(s, i);
    if (!ensure_ascii) {
      if (cp == 0xFFFD && (i - start) == 1) out += "\xEF\xBF\xBD";
      else out.append(s, start, i - start);
    } else if (cp >= 0x10000) {
      cp -= 0x10000;
      append_u16(out, 0xD800 + (cp >> 10));
      append_u16(out, 0xDC00 + (cp & 0x3FF));
    } else {
      append_u16(out, cp);
    }
  }
  out += '"';
}

// The separator before an item of a container at `depth` (and, with empty `first`, before the
// closing bracket): ", " on one line, or a newline and the next level's indent.
void separate(std::string& out, const DumpOptions& options, int depth, bool first) {
  if (options.indent < 0) {
    if (!first) out += ", ";
    return;
  }
  if (!first) out += ',';
  out += '\n';
  out.append(static_cast<size_t>(options.indent) * static_cast<size_t>(depth), ' ');
}

void dump(std::string& out, const nlohmann::ordered_json& v, const DumpOptions& options, int depth) {
  using T = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case T::null: out += "null"; break;
    case T::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case T::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case T::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case T::number_float: out += python_float_repr(v.get<double>()); break;
    case T::string: dump_string(out, v.get_ref<const std::string&>(), options.ensure_ascii); break;
    case T::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v) {
        separate(out, options, depth + 1, first);
        first = false;
        dump(out, item, options, depth + 1);
      }
      if (!first && options.indent >= 0) separate(out, options, depth, true);
      out += ']';
      break;
    }
    case T::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        separate(out, options, depth + 1, first);
        first = false;
        dump_string(out, it.key(), options.ensure_ascii);
        out += ": ";
        dump(out, it.value(), options, depth + 1);
      }
      if (!first && options.indent >= 0) separate(out, options, depth, true);
      out += '}';
      break;
    }
    default: out += "null"; break;  // binary / discarded values never reach a response
  }
}

}  // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits, then laid out with repr's rule: scientific when the decimal
  // exponent is < -4 or >= 16, otherwise positional with at least one fractional digit.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  auto epos = sci.find('e');
  std::string mantissa = sci.substr(0, epos);
  int exponent = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += ebuf;
  } else if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    auto int_len = static_cast<size_t>(exponent + 1);
    if (digits.size() <= int_len) {
      out += digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return out;
}

std::string python_dumps(const nlohmann::ordered_json& value, DumpOptions options) {
  std::string out;
  dump(out, value, options, 0);
  return out;
}

}  // namespace mlxrt::util
