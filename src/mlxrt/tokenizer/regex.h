#pragma once
/** PCRE2 (UTF + UCP, JIT) regexes with Oniguruma's reading of `\s`, which is what HF tokenizers
 * compile its patterns with. Immutable after construction, safe to share between threads. */
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlxrt::tokenizer::detail {

class Regex {
 public:
  /** Compiles `pattern`; throws ConfigError naming `where` and PCRE2's message on failure. */
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /** All non-overlapping matches [begin, end) in s (valid UTF-8), left to right. An empty match
   * advances the search by one character, as Oniguruma's iterator does. */
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  /** A regex matching `literal` exactly. */
  static std::string escape(std::string_view literal);

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

/** Rewrites `\s` / `\S` so PCRE2 matches White_Space as Oniguruma does (PCRE2 leaves out U+0085). */
std::string oniguruma_compatible(const std::string& pattern);

}  // namespace mlxrt::tokenizer::detail
