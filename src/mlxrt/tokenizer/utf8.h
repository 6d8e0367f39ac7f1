#pragma once
/** UTF-8 helpers shared by the tokenizer pipeline: code point iteration, repair of ill-formed
 * input the way Python and Rust do it, and the Unicode predicates Rust's `char` methods use. */
#include <cstdint>
#include <string>
#include <string_view>

namespace mlxrt::tokenizer::detail {

/** Decodes the code point at s[i] (s must be valid UTF-8); sets len to its byte length. */
inline char32_t decode_at(std::string_view s, size_t i, size_t& len) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) { len = 1; return b0; }
  if (b0 < 0xE0) { len = 2; return ((b0 & 0x1F) << 6) | (s[i + 1] & 0x3F); }
  if (b0 < 0xF0) {
    len = 3;
    return ((b0 & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
  }
  len = 4;
  return ((b0 & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
}

/** Byte length of the character starting with lead byte b (1 for continuation bytes). */
inline size_t char_len(unsigned char b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

void append_utf8(std::string& out, char32_t cp);

/** True when s is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF). */
bool is_valid_utf8(std::string_view s);

/** Replaces each maximal ill-formed subsequence by U+FFFD (Python's "replace" handler, Rust's
 * from_utf8_lossy). Returns s unchanged when it is valid. */
std::string repair_utf8(std::string_view s);

/** Rust char::is_whitespace (the White_Space property). */
bool is_whitespace(char32_t c);
/** Rust char::is_alphanumeric (Alphabetic or Numeric: L*, Nl, Other_Alphabetic, N*). */
bool is_alphanumeric(char32_t c);
/** Rust char::is_numeric (Nd, Nl, No). */
bool is_numeric(char32_t c);
/** Unicode punctuation (P*) or ASCII punctuation, as HF's Punctuation pre-tokenizer tests it. */
bool is_punctuation(char32_t c);
/** Rust char::is_control (Cc). */
bool is_control(char32_t c);
/** Nonspacing mark (Mn), what StripAccents removes. */
bool is_nonspacing_mark(char32_t c);

}  // namespace mlxrt::tokenizer::detail
