#pragma once
/** The pieces of Python that mlx-lm's tool parsers lean on, with Python's results: json.loads and
 * JSONDecoder.raw_decode, ast.literal_eval (and ast.parse of a list of calls), float() and int()
 * of a str, str.strip(), and the \w, \d and \s classes of the `regex` module.
 *
 * Text is handled as code points (std::u32string), as Python indexes a str. Values come back as
 * JSON; a value json.dumps cannot write (a set, bytes, a complex number, a tuple key) is a JSON
 * binary value, which the tool-call formatter drops as mlx-lm fails on it. Integers beyond 64 bits
 * are kept as floats. */
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxrt::server::py {

using Json = nlohmann::ordered_json;

/** A Python exception: ValueError (json.JSONDecodeError is one), SyntaxError, TypeError, or any
 * other (OverflowError, AttributeError...). */
enum class ErrorKind { Value, Syntax, Type, Other };
struct Error : std::invalid_argument {
  ErrorKind kind;
  Error(ErrorKind k, const std::string& what) : std::invalid_argument(what), kind(k) {}
};

// --- text -------------------------------------------------------------------------------------
std::u32string to_u32(const std::string& utf8);
std::string to_utf8(const std::u32string& text);
std::string to_utf8(char32_t c);

bool is_word(char32_t c);      // regex \w (str pattern)
bool is_digit(char32_t c);     // regex \d
bool is_re_space(char32_t c);  // regex \s
bool is_py_space(char32_t c);  // str.isspace()

std::u32string strip(const std::u32string& s);  // str.strip()
std::u32string lower_ascii(std::u32string s);   // str.lower() where only ASCII results matter
bool starts_with(const std::u32string& s, const std::u32string& prefix, size_t pos = 0);
bool ends_with(const std::u32string& s, const std::u32string& suffix);
/** str.find; npos when absent. */
size_t find(const std::u32string& s, const std::u32string& needle, size_t pos = 0);

// --- values -----------------------------------------------------------------------------------
/** A value json.dumps cannot write. */
Json unserializable();
bool is_unserializable(const Json& v);
/** Python truthiness of a value. */
bool truthy(const Json& v);

/** json.loads(text) (strict=False lets control characters into strings). */
Json json_loads(const std::u32string& text, bool strict = true);
/** JSONDecoder().raw_decode(text, pos): the value at pos (no whitespace skipped) and its end. */
std::pair<Json, size_t> json_raw_decode(const std::u32string& text, size_t pos);

/** ast.literal_eval(text). */
Json literal_eval(const std::u32string& text);

/** One element of a Python list expression: a call with keyword arguments only. */
struct PyCall {
  std::optional<std::string> name;  // pythonic's _function_name of the callee; nullopt: not a name
  bool is_call = false;             // the element is a call
  bool positional = false;          // it has positional (or *) arguments
  bool star_kwargs = false;         // it has **kwargs
  std::vector<std::pair<std::string, Json>> keywords;  // names and literal values
  std::optional<Error> keyword_error;                  // literal_eval's error on a keyword value
  size_t keyword_error_at = 0;                         // how many keywords came before it
};
/** ast.parse(text, mode="eval").body when it is a list: its elements read as calls, each keyword
 * value through literal_eval after true/false/null became constants. nullopt: the body is not a
 * list. Throws Error(Syntax) when the text is not a Python expression this reader knows. */
std::optional<std::vector<PyCall>> parse_call_list(const std::u32string& text);

/** float(text) / int(text) of a str. */
double py_float(const std::u32string& text);
Json py_int(const std::u32string& text);
/** int(x) of a float (OverflowError for inf, ValueError for NaN) as a JSON integer. */
Json int_of_float(double x);

}  // namespace mlxrt::server::py
