// Python's json.loads, ast.literal_eval, float(), int() and str classes as CPython 3.11 and the
// `regex` module behave, for the ports of mlx_lm/tool_parsers/*.py (mlx-lm 0.32.2).
#include "mlxrt/server/python_values.h"

#include "mlxrt/server/python_json.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace mlxrt::server::py {

namespace {

struct CodePointRange {
  char32_t lo, hi;
};
#include "mlxrt/server/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodePointRange (&table)[N], char32_t c) {
  auto it = std::upper_bound(std::begin(table), std::end(table), c,
                             [](char32_t v, const CodePointRange& r) { return v < r.lo; });
  return it != std::begin(table) && c <= std::prev(it)->hi;
}

[[noreturn]] void fail(ErrorKind kind, const std::string& what) { throw Error(kind, what); }
[[noreturn]] void syntax(const std::string& what) { fail(ErrorKind::Syntax, what); }
[[noreturn]] void value_error(const std::string& what) { fail(ErrorKind::Value, what); }

bool is_ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_hex(char32_t c) { return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int hex_value(char32_t c) { return is_ascii_digit(c) ? int(c - '0') : (c | 0x20) - 'a' + 10; }

/** An integer from its digits (no sign, no underscores) in a base: int64, uint64, or beyond 64
 * bits a float (the one place where Python's unbounded int is not kept). */
Json integer_from_digits(const std::string& digits, int base, bool negative) {
  unsigned __int128 v = 0;
  bool big = false;
  for (char ch : digits) {
    int d = hex_value(static_cast<char32_t>(ch));
    v = v * base + d;
    if (v > static_cast<unsigned __int128>(std::numeric_limits<uint64_t>::max())) big = true;
  }
  if (big) {
    double x = 0;
    for (char ch : digits) x = x * base + hex_value(static_cast<char32_t>(ch));
    return negative ? -x : x;
  }
  auto u = static_cast<uint64_t>(v);
  if (!negative) {
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(u);
    return u;
  }
  if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return -static_cast<int64_t>(u);
  if (u == static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) return std::numeric_limits<int64_t>::min();
  return -static_cast<double>(u);
}

double to_double(const std::string& ascii) {
  errno = 0;
  return std::strtod(ascii.c_str(), nullptr);  // correctly rounded; overflow gives +-inf as in Python
}

Json negate(const Json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    auto i = v.get<int64_t>();
    if (i == std::numeric_limits<int64_t>::min()) return static_cast<uint64_t>(1) << 63;
    return -i;
  }
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (u == static_cast<uint64_t>(1) << 63) return std::numeric_limits<int64_t>::min();
    return -static_cast<double>(u);
  }
  if (v.is_number_float()) return -v.get<double>();
  return v;  // a complex number stays unwritable
}

// --- json ---------------------------------------------------------------------------------------

struct JsonScanner {
  const std::u32string& s;
  bool strict;

  [[noreturn]] void error(const std::string& msg, size_t pos) const {
    value_error(msg + ": char " + std::to_string(pos));
  }

  size_t skip_ws(size_t i) const {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    return i;
  }

  bool at(size_t i, const char* word) const {
    for (size_t k = 0; word[k]; ++k)
      if (i + k >= s.size() || s[i + k] != static_cast<char32_t>(word[k])) return false;
    return true;
  }

  std::pair<std::string, size_t> string_at(size_t i) const {  // i: just after the opening quote
    std::u32string out;
    size_t begin = i - 1;
    for (;;) {
      if (i >= s.size()) error("Unterminated string starting at", begin);
      char32_t c = s[i];
      if (c == '"') return {to_utf8(out), i + 1};
      if (c != '\\') {
        if (strict && c < 0x20) error("Invalid control character at", i);
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= s.size()) error("Unterminated string starting at", begin);
      char32_t e = s[i + 1];
      switch (e) {
        case '"': out += U'"'; break;
        case '\\': out += U'\\'; break;
        case '/': out += U'/'; break;
        case 'b': out += U'\b'; break;
        case 'f': out += U'\f'; break;
        case 'n': out += U'\n'; break;
        case 'r': out += U'\r'; break;
        case 't': out += U'\t'; break;
        case 'u': {
          auto hex4 = [&](size_t p) -> int {
            if (p + 4 > s.size()) return -1;
            int v = 0;
            for (size_t k = p; k < p + 4; ++k) {
              if (!is_hex(s[k])) return -1;
              v = v * 16 + hex_value(s[k]);
            }
            return v;
          };
          int u = hex4(i + 2);
          if (u < 0) error("Invalid \\uXXXX escape", i + 1);
          i += 6;
          if (u >= 0xD800 && u <= 0xDBFF && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            int lo = hex4(i + 2);
            if (lo < 0) error("Invalid \\uXXXX escape", i + 1);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              out += static_cast<char32_t>(0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00));
              i += 6;
              continue;
            }
          }
          out += static_cast<char32_t>(u);
          continue;
        }
        default: error("Invalid \\escape", i);
      }
      i += 2;
    }
  }

  std::pair<Json, size_t> number_at(size_t i) const {
    size_t b = i;
    if (s[i] == '-') ++i;
    if (i < s.size() && s[i] == '0') {
      ++i;
    } else if (i < s.size() && s[i] >= '1' && s[i] <= '9') {
      while (i < s.size() && is_ascii_digit(s[i])) ++i;
    } else {
      error("Expecting value", b);
    }
    size_t int_end = i;
    bool is_float = false;
    if (i + 1 < s.size() && s[i] == '.' && is_ascii_digit(s[i + 1])) {
      i += 2;
      while (i < s.size() && is_ascii_digit(s[i])) ++i;
      is_float = true;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      size_t j = i + 1;
      if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
      if (j < s.size() && is_ascii_digit(s[j])) {
        while (j < s.size() && is_ascii_digit(s[j])) ++j;
        i = j;
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = b; k < i; ++k) text += static_cast<char>(s[k]);
    if (is_float) return {to_double(text), i};
    bool neg = s[b] == '-';
    std::string digits;
    for (size_t k = b + (neg ? 1 : 0); k < int_end; ++k) digits += static_cast<char>(s[k]);
    return {integer_from_digits(digits, 10, neg), i};
  }

  std::pair<Json, size_t> value_at(size_t i, int depth) const {
    if (depth > 900) fail(ErrorKind::Other, "maximum recursion depth exceeded");
    if (i >= s.size()) error("Expecting value", i);
    char32_t c = s[i];
    if (c == '"') {
      auto [str, end] = string_at(i + 1);
      return {Json(str), end};
    }
    if (c == '{') {
      Json obj = Json::object();
      i = skip_ws(i + 1);
      if (i < s.size() && s[i] == '}') return {obj, i + 1};
      for (;;) {
        if (i >= s.size() || s[i] != '"')
          error("Expecting property name enclosed in double quotes", i);
        auto [key, after_key] = string_at(i + 1);
        i = skip_ws(after_key);
        if (i >= s.size() || s[i] != ':') error("Expecting ':' delimiter", i);
        i = skip_ws(i + 1);
        auto [v, after_v] = value_at(i, depth + 1);
        obj[key] = std::move(v);  // a repeated key keeps its first place and its last value
        i = skip_ws(after_v);
        if (i < s.size() && s[i] == '}') return {obj, i + 1};
        if (i >= s.size() || s[i] != ',') error("Expecting ',' delimiter", i);
        i = skip_ws(i + 1);
      }
    }
    if (c == '[') {
      Json arr = Json::array();
      i = skip_ws(i + 1);
      if (i < s.size() && s[i] == ']') return {arr, i + 1};
      for (;;) {
        auto [v, after_v] = value_at(i, depth + 1);
        arr.push_back(std::move(v));
        i = skip_ws(after_v);
        if (i < s.size() && s[i] == ']') return {arr, i + 1};
        if (i >= s.size() || s[i] != ',') error("Expecting ',' delimiter", i);
        i = skip_ws(i + 1);
      }
    }
    if (at(i, "null")) return {Json(nullptr), i + 4};
    if (at(i, "true")) return {Json(true), i + 4};
    if (at(i, "false")) return {Json(false), i + 5};
    if (at(i, "NaN")) return {Json(std::numeric_limits<double>::quiet_NaN()), i + 3};
    if (at(i, "Infinity")) return {Json(std::numeric_limits<double>::infinity()), i + 8};
    if (at(i, "-Infinity")) return {Json(-std::numeric_limits<double>::infinity()), i + 9};
    if (c == '-' || is_ascii_digit(c)) return number_at(i);
    error("Expecting value", i);
  }
};

// --- Python expressions -----------------------------------------------------------------------

enum class Tok { Name, Number, String, Op, Newline, End };

struct Token {
  Tok kind;
  std::u32string text;  // name, operator
  Json value;           // number or string value
  enum Lit { Int, Float, Complex, Str, Bytes, FStr } lit = Int;
};

bool is_keyword(const std::u32string& w) {
  static const char* const kKeywords[] = {"and",   "as",     "assert", "async",  "await",    "break",
                                          "class", "continue", "def",  "del",    "elif",     "else",
                                          "except", "finally", "for",  "from",   "global",   "if",
                                          "import", "in",     "is",     "lambda", "nonlocal", "not",
                                          "or",    "pass",   "raise",  "return", "try",      "while",
                                          "with",  "yield"};
  for (const char* k : kKeywords) {
    std::u32string kw(k, k + std::char_traits<char>::length(k));
    if (w == kw) return true;
  }
  return false;
}

bool is_name_start(char32_t c) { return c == '_' || (is_word(c) && !is_digit(c)); }

class Lexer {
 public:
  explicit Lexer(std::u32string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    size_t i = 0;
    int depth = 0;
    bool line_start = true;
    while (i < s_.size()) {
      if (line_start && depth == 0) {
        size_t j = i;
        int indent = 0;
        while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t' || s_[j] == '\f')) {
          indent = s_[j] == '\f' ? 0 : indent + 1;
          ++j;
        }
        if (j >= s_.size()) break;
        if (s_[j] == '#') {
          while (j < s_.size() && s_[j] != '\n') ++j;
        }
        if (j < s_.size() && s_[j] == '\n') {  // a blank line
          i = j + 1;
          continue;
        }
        if (j >= s_.size()) break;
        if (indent > 0) syntax("unexpected indent");
        i = j;
        line_start = false;
      }
      char32_t c = s_[i];
      if (c == ' ' || c == '\t' || c == '\f') {
        ++i;
      } else if (c == '\\') {
        if (i + 1 < s_.size() && s_[i + 1] == '\n') i += 2;
        else syntax("unexpected character after line continuation character");
      } else if (c == '#') {
        while (i < s_.size() && s_[i] != '\n') ++i;
      } else if (c == '\n') {
        ++i;
        if (depth == 0) {
          out.push_back(Token{Tok::Newline, {}, {}});
          line_start = true;
        }
      } else if (is_ascii_digit(c) || (c == '.' && i + 1 < s_.size() && is_ascii_digit(s_[i + 1]))) {
        out.push_back(number(i));
      } else if (c == '"' || c == '\'') {
        out.push_back(string(i, U""));
      } else if (is_name_start(c)) {
        size_t b = i;
        while (i < s_.size() && is_word(s_[i])) ++i;
        std::u32string word = s_.substr(b, i - b);
        if (i < s_.size() && (s_[i] == '"' || s_[i] == '\'') && is_prefix(word)) {
          out.push_back(string(i, word));
        } else {
          out.push_back(Token{Tok::Name, word, {}});
        }
      } else {
        static const char* const kOps[] = {"...", "**=", "//=", ">>=", "<<=", "**", "//", "==", "!=", "<=", ">=",
                                           "->",  ":=",  "<<",  ">>",  "+=",  "-=", "*=", "/=", "%=", "&=", "|=",
                                           "^=",  "@=",  "(",   ")",   "[",   "]",  "{",  "}",  ",",  ":",  ".",
                                           ";",   "+",   "-",   "*",   "/",   "%",  "@",  "<",  ">",  "=",  "~",
                                           "|",   "&",   "^"};
        bool matched = false;
        for (const char* op : kOps) {
          size_t n = std::char_traits<char>::length(op);
          bool ok = i + n <= s_.size();
          for (size_t k = 0; ok && k < n; ++k) ok = s_[i + k] == static_cast<char32_t>(op[k]);
          if (!ok) continue;
          std::u32string t(op, op + n);
          if (t == U"(" || t == U"[" || t == U"{") {
            if (depth >= 200) syntax("too many nested parentheses");  // the tokenizer's MAXLEVEL
            ++depth;
          }
          if (t == U")" || t == U"]" || t == U"}") {
            if (depth == 0) syntax("unmatched bracket");
            --depth;
          }
          out.push_back(Token{Tok::Op, t, {}});
          i += n;
          matched = true;
          break;
        }
        if (!matched) syntax("invalid character");
      }
    }
    if (depth != 0) syntax("'(' was never closed");
    out.push_back(Token{Tok::End, {}, {}});
    return out;
  }

 private:
  std::u32string s_;

  static bool is_prefix(const std::u32string& w) {
    std::u32string l = lower_ascii(w);
    static const std::u32string kPrefixes[] = {U"r", U"u", U"b", U"f", U"br", U"rb", U"fr", U"rf"};
    return std::find(std::begin(kPrefixes), std::end(kPrefixes), l) != std::end(kPrefixes);
  }

  /** digits with single underscores between them, starting at i; returns the digits. */
  std::string digit_run(size_t& i, bool (*ok)(char32_t)) {
    std::string d;
    while (i < s_.size()) {
      if (ok(s_[i])) {
        d += static_cast<char>(s_[i++]);
      } else if (s_[i] == '_' && !d.empty() && i + 1 < s_.size() && ok(s_[i + 1])) {
        ++i;
      } else {
        break;
      }
    }
    return d;
  }

  Token number(size_t& i) {
    auto dec = [](char32_t c) { return is_ascii_digit(c); };
    Token t{Tok::Number, {}, {}};
    if (s_[i] == '0' && i + 1 < s_.size() && std::string("xXoObB").find(static_cast<char>(s_[i + 1] & 0x7F)) != std::string::npos &&
        s_[i + 1] < 0x80) {
      char kind = static_cast<char>(s_[i + 1] | 0x20);
      i += 2;
      if (i < s_.size() && s_[i] == '_') ++i;
      bool (*ok)(char32_t) = kind == 'x'   ? +[](char32_t c) { return is_hex(c); }
                             : kind == 'o' ? +[](char32_t c) { return c >= '0' && c <= '7'; }
                                           : +[](char32_t c) { return c == '0' || c == '1'; };
      std::string d = digit_run(i, ok);
      if (d.empty() || (i < s_.size() && (is_word(s_[i])))) syntax("invalid number literal");
      t.value = integer_from_digits(d, kind == 'x' ? 16 : kind == 'o' ? 8 : 2, false);
      return t;
    }
    std::string ip = digit_run(i, dec), fp, ex;
    bool is_float = false;
    if (i < s_.size() && s_[i] == '.') {
      ++i;
      is_float = true;
      if (i < s_.size() && is_ascii_digit(s_[i])) fp = digit_run(i, dec);
    }
    if (i < s_.size() && (s_[i] == 'e' || s_[i] == 'E')) {
      size_t j = i + 1;
      std::string sign;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) sign = static_cast<char>(s_[j++]);
      if (j < s_.size() && is_ascii_digit(s_[j])) {
        i = j;
        ex = "e" + sign + digit_run(i, dec);
        is_float = true;
      } else {
        syntax("invalid decimal literal");
      }
    }
    bool imag = false;
    if (i < s_.size() && (s_[i] == 'j' || s_[i] == 'J')) {
      imag = true;
      ++i;
    }
    if (i < s_.size() && (is_word(s_[i]) || s_[i] == '_')) syntax("invalid decimal literal");
    if (imag) {
      t.lit = Token::Complex;
      t.value = unserializable();
      return t;
    }
    if (is_float) {
      t.lit = Token::Float;
      t.value = to_double((ip.empty() ? "0" : ip) + "." + (fp.empty() ? "0" : fp) + ex);
      return t;
    }
    if (ip.size() > 1 && ip[0] == '0' && ip.find_first_not_of('0') != std::string::npos)
      syntax("leading zeros in decimal integer literals are not permitted");
    t.value = integer_from_digits(ip, 10, false);
    return t;
  }

  Token string(size_t& i, const std::u32string& prefix) {
    std::u32string p = lower_ascii(prefix);
    bool raw = p.find(U'r') != std::u32string::npos, bytes = p.find(U'b') != std::u32string::npos,
         fstr = p.find(U'f') != std::u32string::npos;
    char32_t q = s_[i];
    bool triple = i + 2 < s_.size() && s_[i + 1] == q && s_[i + 2] == q;
    i += triple ? 3 : 1;
    std::u32string out;
    for (;;) {
      if (i >= s_.size()) syntax("unterminated string literal");
      char32_t c = s_[i];
      if (c == q && (!triple || (i + 2 < s_.size() && s_[i + 1] == q && s_[i + 2] == q))) {
        i += triple ? 3 : 1;
        break;
      }
      if (c == '\n' && !triple) syntax("unterminated string literal");
      if (bytes && c >= 0x80) syntax("bytes can only contain ASCII literal characters");
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= s_.size()) syntax("unterminated string literal");
      char32_t e = s_[i + 1];
      if (raw) {  // the backslash stays, and protects the next character from ending the string
        out += c;
        out += e;
        i += 2;
        continue;
      }
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += U'\\'; break;
        case '\'': out += U'\''; break;
        case '"': out += U'"'; break;
        case 'a': out += U'\a'; break;
        case 'b': out += U'\b'; break;
        case 'f': out += U'\f'; break;
        case 'n': out += U'\n'; break;
        case 'r': out += U'\r'; break;
        case 't': out += U'\t'; break;
        case 'v': out += U'\v'; break;
        case 'x': {
          if (i + 2 > s_.size() || !is_hex(s_[i]) || !is_hex(s_[i + 1])) syntax("truncated \\xXX escape");
          out += static_cast<char32_t>(hex_value(s_[i]) * 16 + hex_value(s_[i + 1]));
          i += 2;
          break;
        }
        case 'u':
        case 'U': {
          if (bytes) {
            out += U'\\';
            out += e;
            break;
          }
          size_t n = e == 'u' ? 4 : 8;
          uint32_t v = 0;
          for (size_t k = 0; k < n; ++k) {
            if (i + k >= s_.size() || !is_hex(s_[i + k])) syntax("truncated \\uXXXX escape");
            v = v * 16 + hex_value(s_[i + k]);
          }
          if (v > 0x10FFFF) syntax("illegal Unicode character");
          out += static_cast<char32_t>(v);
          i += n;
          break;
        }
        case 'N':
          if (bytes) {
            out += U"\\N";
            break;
          }
          syntax("\\N{...} escapes are not read here");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = e - '0';
            for (int k = 0; k < 2 && i < s_.size() && s_[i] >= '0' && s_[i] <= '7'; ++k) v = v * 8 + (s_[i++] - '0');
            out += static_cast<char32_t>(v);
          } else {
            out += U'\\';
            out += e;
          }
      }
    }
    Token t{Tok::String, {}, {}};
    t.lit = fstr ? Token::FStr : bytes ? Token::Bytes : Token::Str;
    t.value = bytes ? unserializable() : Json(to_utf8(out));
    return t;
  }
};

/** The AST nodes that literal_eval and pythonic's reader look at; anything else is Other. */
struct Node {
  enum Kind { Const, Name, Attribute, Call, List, Tuple, Set, Dict, Unary, Binary, Starred, Other } kind = Other;
  enum ConstKind { Number, Complex, Str, Bytes, Bool, None, Ellipsis } ck = Number;
  Json value;
  std::u32string id;  // Name id, Attribute attr, operator
  std::vector<Node> kids;  // elements; Dict: key, value pairs (a null key Other for **); Call: func first
  struct Keyword;
  std::vector<Keyword> keywords;
  size_t positional = 0;  // Call: positional and * arguments
};

/** A call's keyword argument: its name (nullopt for **). */
struct Node::Keyword {
  std::optional<std::u32string> name;
  Node value;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Node eval_input() {
    Node n = expressions();
    while (peek().kind == Tok::Newline) ++p_;
    if (peek().kind != Tok::End) syntax("invalid syntax");
    return n;
  }

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  // How deeply the nodes being built nest (brackets, unary operators, operator chains, trailers):
  // Python gives up on such input too, and a bound keeps our recursion off the stack's end.
  size_t depth_ = 0;
  static constexpr size_t kMaxDepth = 1000;

  struct Deeper {
    size_t& depth;
    size_t saved;
    explicit Deeper(size_t& d) : depth(d), saved(d) {}
    void step() {
      if (++depth > kMaxDepth) fail(ErrorKind::Other, "maximum recursion depth exceeded during compilation");
    }
    ~Deeper() { depth = saved; }
  };

  const Token& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool is_op(const char32_t* op, size_t k = 0) const { return peek(k).kind == Tok::Op && peek(k).text == op; }
  void expect(const char32_t* op) {
    if (!is_op(op)) syntax("invalid syntax");
    ++p_;
  }
  bool starts_expr() const {
    const Token& k = peek();
    if (k.kind == Tok::Name || k.kind == Tok::Number || k.kind == Tok::String) return true;
    return k.kind == Tok::Op && (k.text == U"(" || k.text == U"[" || k.text == U"{" || k.text == U"-" ||
                                 k.text == U"+" || k.text == U"~" || k.text == U"...");
  }

  /** A comma list that becomes a tuple when it has a comma (the top level and parentheses). */
  Node expressions() {
    Node first = star_or_expr();
    if (!is_op(U",")) return first;
    Node tup;
    tup.kind = Node::Tuple;
    tup.kids.push_back(std::move(first));
    while (is_op(U",")) {
      ++p_;
      if (!starts_expr() && !is_op(U"*")) break;
      tup.kids.push_back(star_or_expr());
    }
    return tup;
  }

  Node star_or_expr() {
    if (is_op(U"*")) {
      ++p_;
      Node s;
      s.kind = Node::Starred;
      s.kids.push_back(arith());
      return s;
    }
    return expr();
  }

  Node expr() {
    Node n = arith();
    if (peek().kind == Tok::Name && is_keyword(peek().text)) syntax("expressions with keywords are not read here");
    return n;
  }

  Node binary(Node l, const std::u32string& op, Node r) {
    Node b;
    b.kind = Node::Binary;
    b.id = op;
    b.kids.push_back(std::move(l));
    b.kids.push_back(std::move(r));
    return b;
  }

  Node arith() {
    Deeper guard(depth_);
    Node n = term();
    while (is_op(U"+") || is_op(U"-")) {
      guard.step();
      std::u32string op = peek().text;
      ++p_;
      n = binary(std::move(n), op, term());
    }
    return n;
  }

  Node term() {
    Deeper guard(depth_);
    Node n = factor();
    while (is_op(U"*") || is_op(U"/") || is_op(U"//") || is_op(U"%") || is_op(U"@")) {
      guard.step();
      std::u32string op = peek().text;
      ++p_;
      n = binary(std::move(n), op, factor());
    }
    return n;
  }

  Node factor() {
    Deeper guard(depth_);
    guard.step();
    if (is_op(U"-") || is_op(U"+") || is_op(U"~")) {
      Node u;
      u.kind = Node::Unary;
      u.id = peek().text;
      ++p_;
      u.kids.push_back(factor());
      return u;
    }
    Node n = primary();
    if (is_op(U"**")) {
      ++p_;
      n = binary(std::move(n), U"**", factor());
    }
    return n;
  }

  Node primary() {
    Deeper guard(depth_);
    Node n = atom();
    for (;;) {
      guard.step();
      if (is_op(U".")) {
        ++p_;
        if (peek().kind != Tok::Name || is_keyword(peek().text)) syntax("invalid syntax");
        Node a;
        a.kind = Node::Attribute;
        a.id = peek().text;
        ++p_;
        a.kids.push_back(std::move(n));
        n = std::move(a);
      } else if (is_op(U"(")) {
        ++p_;
        Node c;
        c.kind = Node::Call;
        c.kids.push_back(std::move(n));
        call_arguments(c);
        n = std::move(c);
      } else if (is_op(U"[")) {
        ++p_;
        Node sub;
        sub.kind = Node::Other;
        sub.kids.push_back(std::move(n));
        sub.kids.push_back(expressions());
        expect(U"]");
        n = std::move(sub);
      } else {
        return n;
      }
    }
  }

  void call_arguments(Node& c) {
    while (!is_op(U")")) {
      if (is_op(U"**")) {
        ++p_;
        c.keywords.push_back(Node::Keyword{std::nullopt, expr()});
      } else if (is_op(U"*")) {
        ++p_;
        if (!c.keywords.empty() && !c.keywords.back().name) syntax("iterable argument unpacking follows keyword argument unpacking");
        expr();
        ++c.positional;
      } else if (peek().kind == Tok::Name && is_op(U"=", 1)) {
        if (is_keyword(peek().text)) syntax("invalid syntax");
        std::u32string name = peek().text;
        p_ += 2;
        c.keywords.push_back(Node::Keyword{name, expr()});
      } else {
        if (!c.keywords.empty()) syntax("positional argument follows keyword argument");
        c.kids.push_back(expr());
        ++c.positional;
      }
      if (!is_op(U",")) break;
      ++p_;
    }
    expect(U")");
  }

  Node atom() {
    const Token& k = peek();
    Node n;
    if (k.kind == Tok::Number) {
      ++p_;
      n.kind = Node::Const;
      n.ck = k.lit == Token::Complex ? Node::Complex : Node::Number;
      n.value = k.value;
      return n;
    }
    if (k.kind == Tok::String) {
      bool any_bytes = false, any_str = false, any_f = false;
      std::string joined;
      while (peek().kind == Tok::String) {
        const Token& s = peek();
        if (s.lit == Token::Bytes) any_bytes = true;
        else any_str = true;
        if (s.lit == Token::FStr) any_f = true;
        if (s.lit == Token::Str) joined += s.value.get<std::string>();
        ++p_;
      }
      if (any_bytes && any_str) syntax("cannot mix bytes and nonbytes literals");
      if (any_f) return n;  // a JoinedStr
      n.kind = Node::Const;
      n.ck = any_bytes ? Node::Bytes : Node::Str;
      n.value = any_bytes ? unserializable() : Json(joined);
      return n;
    }
    if (k.kind == Tok::Name) {
      if (is_keyword(k.text)) syntax("expressions with keywords are not read here");
      ++p_;
      if (k.text == U"True" || k.text == U"False") {
        n.kind = Node::Const;
        n.ck = Node::Bool;
        n.value = k.text == U"True";
      } else if (k.text == U"None") {
        n.kind = Node::Const;
        n.ck = Node::None;
        n.value = nullptr;
      } else {
        n.kind = Node::Name;
        n.id = k.text;
      }
      return n;
    }
    if (is_op(U"...")) {
      ++p_;
      n.kind = Node::Const;
      n.ck = Node::Ellipsis;
      n.value = unserializable();
      return n;
    }
    if (is_op(U"(")) {
      ++p_;
      if (is_op(U")")) {
        ++p_;
        n.kind = Node::Tuple;
        return n;
      }
      Node inner = expressions();
      expect(U")");
      return inner;
    }
    if (is_op(U"[")) {
      ++p_;
      n.kind = Node::List;
      while (!is_op(U"]")) {
        n.kids.push_back(star_or_expr());
        if (!is_op(U",")) break;
        ++p_;
      }
      expect(U"]");
      return n;
    }
    if (is_op(U"{")) {
      ++p_;
      if (is_op(U"}")) {
        ++p_;
        n.kind = Node::Dict;
        return n;
      }
      bool dict = is_op(U"**");
      if (!dict) {
        Node first = star_or_expr();
        if (is_op(U":")) {
          dict = true;
          ++p_;
          n.kids.push_back(std::move(first));
          n.kids.push_back(expr());
        } else {
          n.kids.push_back(std::move(first));
        }
        if (!is_op(U"}")) expect(U",");
      }
      n.kind = dict ? Node::Dict : Node::Set;
      while (!is_op(U"}")) {
        if (dict) {
          if (is_op(U"**")) {
            ++p_;
            n.kids.push_back(Node{});  // no key
            n.kids.back().kind = Node::Other;
            n.kids.back().ck = Node::None;
            n.kids.back().id = U"**";
            n.kids.push_back(arith());
          } else {
            n.kids.push_back(expr());
            expect(U":");
            n.kids.push_back(expr());
          }
        } else {
          n.kids.push_back(star_or_expr());
        }
        if (!is_op(U",")) break;
        ++p_;
      }
      expect(U"}");
      return n;
    }
    syntax("invalid syntax");
  }
};

Node parse_expression(std::u32string text) {
  // Python reads source with universal newlines.
  std::u32string src;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      src += U'\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else if (text[i] == 0) {
      syntax("source code string cannot contain null bytes");
    } else {
      src += text[i];
    }
  }
  return Parser(Lexer(std::move(src)).run()).eval_input();
}

bool hashable(const Node& n) {
  if (n.kind == Node::List || n.kind == Node::Dict || n.kind == Node::Set) return false;
  if (n.kind == Node::Call) return false;  // set()
  if (n.kind == Node::Tuple)
    return std::all_of(n.kids.begin(), n.kids.end(), [](const Node& k) { return hashable(k); });
  return true;
}

[[noreturn]] void malformed() { value_error("malformed node or string"); }

Json convert_num(const Node& n) {
  if (n.kind != Node::Const || (n.ck != Node::Number && n.ck != Node::Complex)) malformed();
  return n.value;
}

Json convert_signed_num(const Node& n) {
  if (n.kind == Node::Unary && (n.id == U"-" || n.id == U"+")) {
    Json v = convert_num(n.kids[0]);
    return n.id == U"-" ? negate(v) : v;
  }
  return convert_num(n);
}

/** json.dumps' text for a dict key, or nullopt when it refuses the key. */
std::optional<std::string> key_text(const Node& key, const Json& v) {
  if (key.kind == Node::Const) {
    switch (key.ck) {
      case Node::Str: return v.get<std::string>();
      case Node::Bool: return v.get<bool>() ? "true" : "false";
      case Node::None: return "null";
      case Node::Number:
        if (v.is_number_float()) {
          double d = v.get<double>();
          if (std::isnan(d)) return "NaN";
          if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
          return python_float_repr(d);
        }
        return v.dump();
      default: return std::nullopt;
    }
  }
  if (key.kind == Node::Unary && v.is_number()) return key_text(Node{Node::Const, Node::Number, v, {}, {}, {}, 0}, v);
  return std::nullopt;
}

Json convert(const Node& n) {
  switch (n.kind) {
    case Node::Const: return n.value;
    case Node::Tuple:
    case Node::List: {
      Json arr = Json::array();
      for (const auto& k : n.kids) arr.push_back(convert(k));
      return arr;
    }
    case Node::Set:
      for (const auto& k : n.kids) {
        convert(k);
        if (!hashable(k)) fail(ErrorKind::Type, "unhashable type");
      }
      return unserializable();
    case Node::Call:
      if (n.kids[0].kind == Node::Name && n.kids[0].id == U"set" && n.positional == 0 && n.keywords.empty())
        return unserializable();
      malformed();
    case Node::Dict: {
      Json obj = Json::object();
      bool writable = true;
      for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
        const Node& key = n.kids[i];
        if (key.kind == Node::Other && key.id == U"**") malformed();
        Json k = convert(key);
        Json v = convert(n.kids[i + 1]);
        if (!hashable(key)) fail(ErrorKind::Type, "unhashable type");
        auto text = key_text(key, k);
        if (!text) {
          writable = false;
          continue;
        }
        obj[*text] = std::move(v);
      }
      return writable ? obj : unserializable();
    }
    case Node::Unary:
    case Node::Binary:
      if (n.kind == Node::Binary && (n.id == U"+" || n.id == U"-")) {
        Json left = convert_signed_num(n.kids[0]);
        Json right = convert_num(n.kids[1]);
        if (left.is_number() && n.kids[1].ck == Node::Complex) return unserializable();
        malformed();
      }
      return convert_signed_num(n);
    default: malformed();
  }
}

/** pythonic's _JSONLiterals: the names true, false and null become constants. */
void json_literals(Node& n) {
  if (n.kind == Node::Name && (n.id == U"true" || n.id == U"false" || n.id == U"null")) {
    n.kind = Node::Const;
    n.ck = n.id == U"null" ? Node::None : Node::Bool;
    n.value = n.id == U"null" ? Json(nullptr) : Json(n.id == U"true");
    return;
  }
  for (auto& k : n.kids) json_literals(k);
  for (auto& [_, v] : n.keywords) json_literals(v);
}

std::optional<std::string> function_name(const Node& f) {
  if (f.kind == Node::Name) return to_utf8(f.id);
  if (f.kind == Node::Attribute) {
    auto parent = function_name(f.kids[0]);
    return parent ? *parent + "." + to_utf8(f.id) : to_utf8(f.id);
  }
  return std::nullopt;
}

}  // namespace

// --- text -------------------------------------------------------------------------------------

std::u32string to_u32(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto b0 = static_cast<unsigned char>(s[i]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    bool ok = true;
    for (int k = 1; k < len && ok; ++k) {
      auto b = static_cast<unsigned char>(s[i + k]);
      ok = (b >> 6) == 0x2;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += cp;
    i += len;
  }
  return out;
}

std::string to_utf8(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {  // lone surrogates too, as Python keeps them in a str
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

std::string to_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) out += to_utf8(c);
  return out;
}

bool is_word(char32_t c) { return in_ranges(kWordRanges, c); }
bool is_digit(char32_t c) { return in_ranges(kDigitRanges, c); }

bool is_re_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_py_space(char32_t c) { return is_re_space(c) || (c >= 0x1C && c <= 0x1F); }

std::u32string strip(const std::u32string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_py_space(s[b])) ++b;
  while (e > b && is_py_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::u32string lower_ascii(std::u32string s) {
  for (auto& c : s)
    if (c >= 'A' && c <= 'Z') c += 32;
  return s;
}

bool starts_with(const std::u32string& s, const std::u32string& prefix, size_t pos) {
  return pos <= s.size() && s.compare(pos, prefix.size(), prefix) == 0 && s.size() - pos >= prefix.size();
}

bool ends_with(const std::u32string& s, const std::u32string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

size_t find(const std::u32string& s, const std::u32string& needle, size_t pos) { return s.find(needle, pos); }

// --- values -----------------------------------------------------------------------------------

Json unserializable() { return Json::binary({}); }
bool is_unserializable(const Json& v) {
  if (v.is_binary()) return true;
  if (v.is_array() || v.is_object())
    for (const auto& x : v) if (is_unserializable(x)) return true;
  return false;
}

bool truthy(const Json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number_unsigned()) return v.get<uint64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get<std::string>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

Json json_loads(const std::u32string& text, bool strict) {
  JsonScanner sc{text, strict};
  if (!text.empty() && text[0] == 0xFEFF) value_error("Unexpected UTF-8 BOM (decode using utf-8-sig)");
  auto [v, end] = sc.value_at(sc.skip_ws(0), 0);
  end = sc.skip_ws(end);
  if (end != text.size()) sc.error("Extra data", end);
  return v;
}

std::pair<Json, size_t> json_raw_decode(const std::u32string& text, size_t pos) {
  JsonScanner sc{text, true};
  return sc.value_at(pos, 0);
}

Json literal_eval(const std::u32string& text) {
  size_t b = 0;
  while (b < text.size() && (text[b] == ' ' || text[b] == '\t')) ++b;
  return convert(parse_expression(text.substr(b)));
}

std::optional<std::vector<PyCall>> parse_call_list(const std::u32string& text) {
  Node body = parse_expression(text);
  if (body.kind != Node::List) return std::nullopt;
  std::vector<PyCall> calls;
  for (auto& elt : body.kids) {
    PyCall c;
    if (elt.kind == Node::Call) {
      c.is_call = true;
      c.positional = elt.positional > 0;
      c.name = function_name(elt.kids[0]);
      for (auto& [name, value] : elt.keywords) {
        if (!name) {
          c.star_kwargs = true;
          break;
        }
        json_literals(value);
        try {
          c.keywords.emplace_back(to_utf8(*name), convert(value));
        } catch (const Error& e) {
          c.keyword_error = e;
          c.keyword_error_at = c.keywords.size();
          break;
        }
      }
    }
    calls.push_back(std::move(c));
  }
  return calls;
}

double py_float(const std::u32string& text) {
  std::u32string s = strip(text);
  std::u32string body = s;
  std::string sign;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    if (body[0] == '-') sign = "-";
    body = body.substr(1);
  }
  std::u32string l = lower_ascii(body);
  if (l == U"inf" || l == U"infinity") return sign.empty() ? INFINITY : -INFINITY;
  if (l == U"nan") return std::numeric_limits<double>::quiet_NaN();
  std::string ascii;
  size_t i = 0;
  auto digits = [&](bool required) {
    size_t n = 0;
    while (i < body.size()) {
      if (is_ascii_digit(body[i])) {
        ascii += static_cast<char>(body[i++]);
        ++n;
      } else if (body[i] == '_' && n > 0 && i + 1 < body.size() && is_ascii_digit(body[i + 1])) {
        ++i;
      } else {
        break;
      }
    }
    if (required && n == 0) value_error("could not convert string to float");
    return n;
  };
  size_t ni = digits(false), nf = 0;
  if (i < body.size() && body[i] == '.') {
    ascii += '.';
    ++i;
    nf = digits(false);
  }
  if (ni + nf == 0) value_error("could not convert string to float");
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ascii += 'e';
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ascii += static_cast<char>(body[i++]);
    digits(true);
  }
  if (i != body.size()) value_error("could not convert string to float");
  return to_double(sign + ascii);
}

Json py_int(const std::u32string& text) {
  std::u32string s = strip(text);
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  std::string d;
  while (i < s.size()) {
    if (is_ascii_digit(s[i])) {
      d += static_cast<char>(s[i++]);
    } else if (s[i] == '_' && !d.empty() && i + 1 < s.size() && is_ascii_digit(s[i + 1])) {
      ++i;
    } else {
      break;
    }
  }
  if (d.empty() || i != s.size()) value_error("invalid literal for int() with base 10");
  return integer_from_digits(d, 10, neg);
}

Json int_of_float(double x) {
  if (std::isinf(x)) fail(ErrorKind::Other, "cannot convert float infinity to integer");
  if (std::isnan(x)) value_error("cannot convert float NaN to integer");
  double t = std::trunc(x);
  if (t >= -9223372036854775808.0 && t < 9223372036854775808.0) return static_cast<int64_t>(t);
  if (t >= 0 && t < 18446744073709551616.0) return static_cast<uint64_t>(t);
  return t;
}

}  // namespace mlxrt::server::py
