#include "mlxrt/generate/json_schema_check.h"

#include <set>

namespace mlxrt::generate {

namespace {

using json = nlohmann::ordered_json;

// Keywords of JSON Schema that xgrammar's converter reads but does not enforce (it only logs them,
// or drops them in some combinations): a schema using them could be "satisfied" by output that
// does not validate, so it is refused instead.
const std::set<std::string>& unenforced_keywords() {
  static const std::set<std::string> k = {
      "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
      "uniqueItems", "contains", "minContains", "maxContains", "$dynamicRef", "$recursiveRef",
      "contentSchema"};
  return k;
}

// The string formats the engine turns into a pattern (JSONFormatToRegexPattern in xgrammar 0.2.8).
const std::set<std::string>& known_formats() {
  static const std::set<std::string> k = {
      "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid", "uri",
      "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"};
  return k;
}

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// Depth-first over every subschema; returns the first problem.
std::string check_schema(const json& s, const std::string& at) {
  if (!s.is_object()) return "";
  const std::string where = at.empty() ? "/" : at;
  for (const auto& [key, value] : s.items())
    if (unenforced_keywords().count(key)) return "keyword \"" + key + "\" at " + where;
  if (auto f = s.find("format"); f != s.end() && f->is_string() && !known_formats().count(f->get<std::string>()))
    return "keyword \"format\" with the value \"" + f->get<std::string>() + "\" at " + where;
  const bool generated_string = s.contains("pattern") || s.contains("format");
  if (generated_string && (s.contains("minLength") || s.contains("maxLength")))
    return std::string("keyword \"") + (s.contains("minLength") ? "minLength" : "maxLength") + "\" beside \"" +
           (s.contains("pattern") ? "pattern" : "format") + "\" at " + where;
  if (auto m = s.find("multipleOf"); m != s.end()) {
    const auto t = s.find("type");
    if (!(t != s.end() && t->is_string() && *t == "integer" && m->is_number_integer()))
      return "keyword \"multipleOf\" (enforced only for integers by an integer) at " + where;
  }
  // Subschemas: maps of schemas, lists of schemas, single schemas.
  for (const char* k : {"properties", "patternProperties", "$defs", "definitions"}) {
    if (auto it = s.find(k); it != s.end() && it->is_object())
      for (const auto& [name, sub] : it->items()) {
        auto p = check_schema(sub, at + "/" + k + "/" + pointer_token(name));
        if (!p.empty()) return p;
      }
  }
  for (const char* k : {"anyOf", "oneOf", "allOf", "prefixItems"}) {
    if (auto it = s.find(k); it != s.end() && it->is_array())
      for (size_t i = 0; i < it->size(); ++i) {
        auto p = check_schema((*it)[i], at + "/" + k + "/" + std::to_string(i));
        if (!p.empty()) return p;
      }
  }
  for (const char* k : {"items", "additionalProperties", "propertyNames", "unevaluatedProperties",
                        "unevaluatedItems", "additionalItems"}) {
    if (auto it = s.find(k); it != s.end()) {
      if (it->is_array()) {  // draft-04 tuple items
        for (size_t i = 0; i < it->size(); ++i) {
          auto p = check_schema((*it)[i], at + "/" + k + "/" + std::to_string(i));
          if (!p.empty()) return p;
        }
      } else {
        auto p = check_schema(*it, at + "/" + k);
        if (!p.empty()) return p;
      }
    }
  }
  return "";
}

}  // namespace

std::string unsupported_schema_keyword(const nlohmann::ordered_json& schema) { return check_schema(schema, ""); }

std::string unsupported_schema_keyword(const std::string& schema_text) {
  json s = json::parse(schema_text, nullptr, false);
  if (s.is_discarded()) return "";
  return check_schema(s, "");
}

}  // namespace mlxrt::generate
