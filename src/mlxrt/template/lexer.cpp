#include "mlxrt/template/lexer.h"

#include <algorithm>
#include <cstring>

#include "mlxrt/template/text.h"

namespace mlxrt::tmpl::detail {

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src.size(); ++i)
      if (src[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      std::size_t start = find_tag(pos);
      std::string text = src_.substr(pos, start - pos);
      if (start == src_.size()) {
        emit_text(text, pos);
        break;
      }
      char kind = src_[start + 1];
      char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
      std::size_t raw_body = kind == '%' ? match_raw_begin(start) : 0;
      strip_before(text, sign, kind != '{', line_starting);
      emit_text(text, pos);
      std::size_t after = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(start, after);
      } else if (raw_body) {
        pos = lex_raw(start, raw_body);
      } else {
        pos = lex_tag(kind, start, after);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back({Tok::kEnd, "", line_of(src_.size()), col_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag(std::size_t pos) const {
    while (true) {
      std::size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return src_.size();
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void strip_before(std::string& text, char sign, bool block_like, bool line_starting) const {
    if (sign == '-') {
      text = py_strip(text, nullptr, false, true);
    } else if (sign != '+' && block_like) {
      std::size_t nl = text.rfind('\n');
      std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        std::string_view rest(text.data() + l_pos, text.size() - l_pos);
        bool all_ws = !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) { return is_ws(c); });
        if (all_ws) text.resize(l_pos);
      }
    }
  }

  void emit_text(const std::string& text, std::size_t pos) {
    if (!text.empty()) tokens_.push_back({Tok::kText, text, line_of(pos), col_of(pos)});
  }

  std::size_t skip_ws(std::size_t p) const {
    while (p < src_.size() && is_ws(src_[p])) ++p;
    return p;
  }

  /** The end of `{% raw %}` (where its body starts) when the tag at `start` is one, else 0. */
  std::size_t match_raw_begin(std::size_t start) const {
    std::size_t p = start + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_ws(p);
    if (src_.compare(p, 3, "raw") != 0) return 0;
    p = skip_ws(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) return skip_ws(p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return 0;
  }

  std::size_t lex_raw(std::size_t start, std::size_t body) {
    std::size_t search = body;
    while (true) {
      std::size_t p = src_.find("{%", search);
      if (p == std::string::npos) fail("Missing end of raw directive", start);
      std::size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q = skip_ws(q);
      if (src_.compare(q, 6, "endraw") == 0) {
        std::size_t r = skip_ws(q + 6);
        std::size_t end = 0;
        if (src_.compare(r, 3, "+%}") == 0) end = r + 3;
        else if (src_.compare(r, 3, "-%}") == 0) end = skip_ws(r + 3);
        else if (src_.compare(r, 2, "%}") == 0) end = r + 2 + (r + 2 < src_.size() && src_[r + 2] == '\n');
        if (end) {
          std::string text = src_.substr(body, p - body);
          strip_before(text, sign, true, body > 0 && src_[body - 1] == '\n');
          emit_text(text, body);
          return end;
        }
      }
      search = p + 2;
    }
  }

  std::size_t lex_comment(std::size_t start, std::size_t after) {
    std::size_t p = src_.find("#}", after);
    if (p == std::string::npos) fail("Missing end of comment tag", start);
    char sign = p > after && (src_[p - 1] == '-' || src_[p - 1] == '+') ? src_[p - 1] : 0;
    std::size_t end = p + 2;
    if (sign == '-') return skip_ws(end);
    if (sign == '+') return end;
    return end < src_.size() && src_[end] == '\n' ? end + 1 : end;
  }

  std::size_t lex_tag(char kind, std::size_t start, std::size_t p) {
    tokens_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", line_of(start), col_of(start)});
    std::vector<char> balance;
    while (true) {
      p = skip_ws(p);
      if (p >= src_.size()) fail(kind == '{' ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'", start);
      if (balance.empty()) {
        std::size_t end = match_tag_end(kind, p);
        if (end) {
          tokens_.push_back({kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", line_of(p), col_of(p)});
          return end;
        }
      }
      p = lex_token(p, balance);
    }
  }

  std::size_t match_tag_end(char kind, std::size_t p) const {
    if (kind == '{') {
      if (src_.compare(p, 3, "-}}") == 0) return skip_ws(p + 3);
      if (src_.compare(p, 2, "}}") == 0) return p + 2;
      return 0;
    }
    if (src_.compare(p, 3, "-%}") == 0) return skip_ws(p + 3);
    if (src_.compare(p, 3, "+%}") == 0) return p + 3;
    if (src_.compare(p, 2, "%}") == 0) return p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n');
    return 0;
  }

  std::size_t lex_token(std::size_t p, std::vector<char>& balance) {
    char c = src_[p];
    if (is_name_start(c)) {
      std::size_t e = p;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      tokens_.push_back({Tok::kName, src_.substr(p, e - p), line_of(p), col_of(p)});
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* ops3[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : ops3)
      if (src_.compare(p, 2, op) == 0) {
        tokens_.push_back({Tok::kOp, op, line_of(p), col_of(p)});
        return p + 2;
      }
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr)
      fail(std::string("unexpected char '") + c + "'", p);
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c);
    } else if (c == ')' || c == ']' || c == '}') {
      char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (balance.empty()) fail(std::string("unexpected '") + c + "'", p);
      if (balance.back() != open) fail(std::string("unexpected '") + c + "', expected a closing bracket for '" + balance.back() + "'", p);
      balance.pop_back();
    }
    tokens_.push_back({Tok::kOp, std::string(1, c), line_of(p), col_of(p)});
    return p + 1;
  }

  std::size_t digits(std::size_t p) const {
    // \d+(_\d+)*
    while (true) {
      while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
        ++p;
        continue;
      }
      return p;
    }
  }

  std::size_t lex_number(std::size_t p) {
    std::size_t e = digits(p);
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      std::size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (std::size_t i = p; i < e; ++i)
      if (src_[i] != '_') text.push_back(src_[i]);
    tokens_.push_back({is_float ? Tok::kFloat : Tok::kInt, text, line_of(p), col_of(p)});
    return e;
  }

  std::size_t lex_string(std::size_t p) {
    char q = src_[p];
    std::string out;
    std::size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) fail("unexpected end of string", p);
      char c = src_[i];
      if (c == q) break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail("unexpected end of string", p);
      i = unescape(i, out);
    }
    tokens_.push_back({Tok::kString, out, line_of(p), col_of(p)});
    return i + 1;
  }

  /** Python's unicode-escape decoding of one backslash sequence at `i`; returns the next index. */
  std::size_t unescape(std::size_t i, std::string& out) {
    char e = src_[i + 1];
    auto hex_code = [&](std::size_t start, int n) -> char32_t {
      char32_t v = 0;
      for (int k = 0; k < n; ++k) {
        std::size_t j = start + k;
        if (j >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[j])))
          fail("truncated \\x/\\u/\\U escape in string", i);
        char h = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[j])));
        v = v * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
      }
      return v;
    };
    switch (e) {
      case '\n': return i + 2;
      case '\\': out.push_back('\\'); return i + 2;
      case '\'': out.push_back('\''); return i + 2;
      case '"': out.push_back('"'); return i + 2;
      case 'a': out.push_back('\a'); return i + 2;
      case 'b': out.push_back('\b'); return i + 2;
      case 'f': out.push_back('\f'); return i + 2;
      case 'n': out.push_back('\n'); return i + 2;
      case 'r': out.push_back('\r'); return i + 2;
      case 't': out.push_back('\t'); return i + 2;
      case 'v': out.push_back('\v'); return i + 2;
      case 'x': utf8_append(out, hex_code(i + 2, 2)); return i + 4;
      case 'u': utf8_append(out, hex_code(i + 2, 4)); return i + 6;
      case 'U': {
        char32_t c = hex_code(i + 2, 8);
        if (c > 0x10FFFF) fail("illegal Unicode character in \\U escape", i);
        utf8_append(out, c);
        return i + 10;
      }
      default: break;
    }
    if (e >= '0' && e <= '7') {
      char32_t v = 0;
      std::size_t j = i + 1;
      for (int k = 0; k < 3 && j < src_.size() && src_[j] >= '0' && src_[j] <= '7'; ++k, ++j) v = v * 8 + (src_[j] - '0');
      utf8_append(out, v);
      return j;
    }
    if (e == 'N') fail("\\N{...} escapes are not supported", i);
    out.push_back('\\');
    return i + 1;
  }

  [[noreturn]] void fail(const std::string& message, std::size_t pos) const {
    throw SyntaxFailure{message, line_of(pos), col_of(pos)};
  }

  int line_of(std::size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    return static_cast<int>(it - line_starts_.begin());
  }
  int col_of(std::size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    return static_cast<int>(pos - *(it - 1)) + 1;
  }

  const std::string& src_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace mlxrt::tmpl::detail
