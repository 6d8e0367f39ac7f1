#pragma once
/** Added tokens (tokenizer.json `added_tokens`): found in the text before the model runs, with
 * HF's leftmost-longest matching and lstrip / rstrip / single_word handling. Tokens with
 * normalized=false are matched in the raw text, the others in the normalized text (their content
 * normalized the same way). */
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "mlxrt/tokenizer/components.h"
#include "mlxrt/tokenizer/vocab.h"

namespace mlxrt::tokenizer::detail {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  /** What id -> token gives: HF keeps the normalized content for normalized tokens. */
  std::string surface;
};

/** A piece of input after added-token splitting: either text still to tokenize or one token id. */
struct Segment {
  std::string text;
  std::optional<int32_t> id;
  bool at_start = false;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  /** Splits text on tokens of one kind (normalized or not); empty text pieces are dropped. */
  void split(const Segment& in, bool normalized, std::vector<Segment>& out) const;

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> find(std::string_view content) const;
  bool is_special_content(std::string_view content) const { return special_contents_.count(std::string(content)) > 0; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  // A byte trie over token contents, children in one hash map keyed by (node, byte).
  struct Trie {
    std::unordered_map<uint64_t, int32_t> children;
    std::vector<int32_t> terminal;  // node -> token index, -1 if none
    std::array<bool, 256> first_byte{};
    void insert(std::string_view s, int32_t token_index);
    /** Longest token starting at s[pos]: (end, token index), or token index -1. */
    std::pair<size_t, int32_t> longest_at(std::string_view s, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  TokenMap by_content_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_set<std::string> special_contents_;
  Trie raw_, normalized_;
};

}  // namespace mlxrt::tokenizer::detail
