#pragma once
/** UTF-8 and the parts of Python's str semantics that templates observe: code-point indexing,
 * str.isspace / str.isprintable, case mapping, splitlines. */
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlxrt::tmpl::detail {

/** Decodes UTF-8; invalid bytes become U+FFFD-free surrogate escapes (0xDC80 + byte), as Python's
 * surrogateescape would, so that encoding back restores the original bytes. */
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
/** Number of code points. */
std::size_t utf8_length(std::string_view s);

bool py_isspace(char32_t c);
bool py_isprintable(char32_t c);
bool py_isalnum(char32_t c);
bool py_isdigit(char32_t c);
bool py_isalpha(char32_t c);
char32_t py_upper(char32_t c);
char32_t py_lower(char32_t c);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
/** str.strip / lstrip / rstrip; `chars` null means whitespace. */
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
/** str.splitlines(keepends=False). */
std::vector<std::string> py_splitlines(std::string_view s);
/** str.split(sep=None or sep, maxsplit). */
std::vector<std::string> py_split(std::string_view s, const std::string* sep, std::int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, std::int64_t maxsplit);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, std::int64_t count);
/** The string repr (quote choice and escapes as Python's repr(str)). */
std::string py_str_repr(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);

}  // namespace mlxrt::tmpl::detail
