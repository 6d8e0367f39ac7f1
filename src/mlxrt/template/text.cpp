#include "mlxrt/template/text.h"

#include <algorithm>

namespace mlxrt::tmpl::detail {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 0 : (b >> 5) == 0x6 ? 1 : (b >> 4) == 0xE ? 2 : (b >> 3) == 0x1E ? 3 : -1;
    char32_t c = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
    bool ok = n >= 0 && i + static_cast<std::size_t>(n) < s.size();
    for (int k = 1; ok && k <= n; ++k) {
      auto cb = static_cast<unsigned char>(s[i + k]);
      if ((cb & 0xC0) != 0x80) ok = false;
      else c = (c << 6) | (cb & 0x3F);
    }
    if (ok && n > 0) {
      static const char32_t min_by_len[] = {0, 0x80, 0x800, 0x10000};
      if (c < min_by_len[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) ok = false;
    }
    if (!ok) {
      out.push_back(0xDC00 + b);  // surrogateescape
      ++i;
      continue;
    }
    out.push_back(c);
    i += n + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) {  // surrogateescape round trip
    out.push_back(static_cast<char>(c - 0xDC00));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

std::size_t utf8_length(std::string_view s) {
  bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (ascii) return s.size();
  return utf8_decode(s).size();
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool py_isprintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0)) return false;
  if (c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0xFFFE || c == 0xFFFF) return false;
  if ((c >= 0xE0000 && c <= 0xE0FFF) || c >= 0xF0000) return false;
  return true;
}

bool py_isdigit(char32_t c) { return c >= '0' && c <= '9'; }

bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  // Outside ASCII: letters of the scripts templates meet; punctuation and symbols are not.
  if (py_isspace(c) || !py_isprintable(c)) return false;
  if ((c >= 0xC0 && c <= 0x24F && c != 0xD7 && c != 0xF7) || (c >= 0x370 && c <= 0x52F)) return true;
  if (c >= 0x2000 && c <= 0x2BFF) return false;  // punctuation, symbols, arrows
  if (c >= 0x3000 && c <= 0x303F) return false;  // CJK punctuation
  if (c >= 0xFF00 && c <= 0xFF20) return false;
  if (c >= 0x1F000 && c <= 0x1FAFF) return false;  // emoji
  return c >= 0x250;
}

bool py_isalnum(char32_t c) { return py_isdigit(c) || py_isalpha(c); }

char32_t py_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x131 && c != 0x138 && c != 0x149) {
    bool odd_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if (odd_lower) return (c & 1) ? c - 1 : c;
    return (c & 1) ? c : c - 1;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t py_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x138 && c != 0x149) {
    bool even_upper = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if (even_upper) return (c & 1) ? c : c + 1;
    return (c & 1) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

static bool is_cased(char32_t c) { return py_upper(c) != c || py_lower(c) != c; }

std::string py_upper(std::string_view s) {
  std::u32string u = utf8_decode(s);
  for (auto& c : u) {
    if (c == 0xDF) continue;  // ß upper-cases to "SS" below
    c = py_upper(c);
  }
  std::string out;
  for (char32_t c : u) {
    if (c == 0xDF) out += "SS";
    else utf8_append(out, c);
  }
  return out;
}

std::string py_lower(std::string_view s) {
  std::u32string u = utf8_decode(s);
  for (auto& c : u) c = py_lower(c);
  return utf8_encode(u);
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

static bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::u32string u = utf8_decode(s);
  std::vector<std::string> out;
  std::size_t start = 0, i = 0;
  while (i < u.size()) {
    if (is_line_break(u[i])) {
      out.push_back(utf8_encode(std::u32string_view(u).substr(start, i - start)));
      if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      start = ++i;
    } else {
      ++i;
    }
  }
  if (start < u.size()) out.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return out;
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t start = 0;
    while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
      std::size_t p = s.find(*sep, start);
      if (p == std::string_view::npos) break;
      out.emplace_back(s.substr(start, p - start));
      start = p + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::u32string u = utf8_decode(s);
  std::size_t i = 0;
  while (true) {
    while (i < u.size() && py_isspace(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) >= maxsplit) {
      std::size_t e = u.size();
      while (e > i && py_isspace(u[e - 1])) --e;
      out.push_back(utf8_encode(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    std::size_t b = i;
    while (i < u.size() && !py_isspace(u[i])) ++i;
    out.push_back(utf8_encode(std::u32string_view(u).substr(b, i - b)));
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, std::int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    std::size_t end = s.size();
    while (static_cast<std::int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      std::size_t p = s.rfind(*sep, end - sep->size());
      if (p == std::string_view::npos) break;
      out.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::u32string u = utf8_decode(s);
  std::size_t i = u.size();
  while (true) {
    while (i > 0 && py_isspace(u[i - 1])) --i;
    if (i == 0) break;
    if (static_cast<std::int64_t>(out.size()) >= maxsplit) {
      std::size_t b = 0;
      while (b < i && py_isspace(u[b])) ++b;
      out.push_back(utf8_encode(std::u32string_view(u).substr(b, i - b)));
      break;
    }
    std::size_t e = i;
    while (i > 0 && !py_isspace(u[i - 1])) --i;
    out.push_back(utf8_encode(std::u32string_view(u).substr(i, e - i)));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, std::int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` between every code point (and at both ends).
    std::u32string u = utf8_decode(s);
    std::int64_t done = 0;
    for (std::size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < u.size()) utf8_append(out, u[i]);
    }
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    std::size_t p = s.find(old, start);
    if (p == std::string_view::npos) break;
    out.append(s.substr(start, p - start));
    out.append(repl);
    start = p + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string py_str_repr(std::string_view s) {
  std::u32string u = utf8_decode(s);
  bool has_single = u.find(U'\'') != std::u32string::npos;
  bool has_double = u.find(U'"') != std::u32string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  static const char* hex = "0123456789abcdef";
  for (char32_t c : u) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_isprintable(c) && !(c >= 0xDC80 && c <= 0xDCFF)) {
      utf8_append(out, c);
    } else if (c < 0x100) {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    } else if (c < 0x10000) {
      out += "\\u";
      for (int k = 12; k >= 0; k -= 4) out.push_back(hex[(c >> k) & 15]);
    } else {
      out += "\\U";
      for (int k = 28; k >= 0; k -= 4) out.push_back(hex[(c >> k) & 15]);
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::u32string u = utf8_decode(s);
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? py_upper(u[i]) : py_lower(u[i]);
  return utf8_encode(u);
}

std::string py_title(std::string_view s) {
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    bool cased = is_cased(c);
    c = cased ? (prev_cased ? py_lower(c) : py_upper(c)) : c;
    prev_cased = cased;
  }
  return utf8_encode(u);
}

}  // namespace mlxrt::tmpl::detail
