#pragma once
/** The template lexer, with jinja2's whitespace rules under transformers' settings: trim_blocks,
 * lstrip_blocks, `-`/`+` whitespace control, newlines normalised to \n, one trailing newline dropped. */
#include <string>
#include <string_view>
#include <vector>

namespace mlxrt::tmpl::detail {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok type;
  std::string value;
  int line;
  int column;
};

/** Thrown by the lexer and parser; carries the position. */
struct SyntaxFailure {
  std::string message;
  int line;
  int column;
};

/** Newline-normalised source as jinja2 sees it. */
std::string normalize_source(std::string_view source);

/** Tokenises normalised source. Throws SyntaxFailure. */
std::vector<Token> tokenize(const std::string& source);

}  // namespace mlxrt::tmpl::detail
