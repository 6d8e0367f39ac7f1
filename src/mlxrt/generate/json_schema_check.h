#pragma once
/** The JSON-schema keywords constrained decoding (grammar_constraint.h) would read but not enforce:
 * a schema using one is refused rather than "satisfied" by output that does not validate. No MLX or
 * engine dependency (the request parser checks schemas before any generation). */
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::generate {

/** The first such keyword in `schema`, as "keyword \"K\" at /json/pointer" (or the unknown
 * "format" value, or min/maxLength beside pattern/format, or multipleOf on numbers), or "" when
 * every keyword is enforced. Text that is not JSON gives "" (the caller reports that). */
std::string unsupported_schema_keyword(const std::string& schema_text);
std::string unsupported_schema_keyword(const nlohmann::ordered_json& schema);

}  // namespace mlxrt::generate
