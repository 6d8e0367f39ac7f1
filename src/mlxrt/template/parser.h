#pragma once
/** The parser: jinja2's grammar (statements, expression precedence, filters and tests) over the
 * lexer's tokens. Unknown filters and tests are rejected here, as jinja2 rejects them when it
 * compiles the template. */
#include <string>
#include <vector>

#include "mlxrt/template/ast.h"
#include "mlxrt/template/lexer.h"

namespace mlxrt::tmpl::detail {

/** Parses tokens into a body. Throws SyntaxFailure. */
Body parse_tokens(const std::vector<Token>& tokens);

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace mlxrt::tmpl::detail
