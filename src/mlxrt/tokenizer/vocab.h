#pragma once
/** A token <-> id table with string_view lookups, shared by the models. */
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mlxrt::tokenizer::detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Vocab {
 public:
  /** Adds a token; a second id for the same token replaces the first (as a JSON object would). */
  void add(std::string token, int32_t id);
  std::optional<int32_t> find(std::string_view token) const {
    auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !present_[id]) return nullptr;
    return &tokens_[id];
  }
  size_t size() const { return ids_.size(); }
  /** One past the largest id. */
  size_t limit() const { return tokens_.size(); }
  void reserve(size_t n) {
    ids_.reserve(n);
    tokens_.reserve(n);
    present_.reserve(n);
  }

 private:
  TokenMap ids_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
};

}  // namespace mlxrt::tokenizer::detail
