#pragma once
/** The BPE model: merge-rank byte pair encoding with a per-word cache, byte fallback, unk fusing,
 * continuing-subword prefix / end-of-word suffix and `ignore_merges` (whole-word lookups first). */
#include <array>
#include <memory>
#include <mutex>

#include "mlxrt/tokenizer/components.h"
#include "mlxrt/tokenizer/vocab.h"

namespace mlxrt::tokenizer::detail {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::optional<std::string> continuing_subword_prefix;
  std::optional<std::string> end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class Bpe : public Model {
 public:
  /** `merges` are pairs of token strings in rank order; `where` names the source for errors. */
  Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
      const std::string& where);

  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override { return vocab_.find(token); }
  const std::string* id_to_token(int32_t id) const override { return vocab_.token(id); }
  size_t size() const override { return vocab_.size(); }
  size_t id_limit() const override { return vocab_.limit(); }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge_all(std::vector<int32_t>& ids) const;

  // A bounded cache of word -> ids, split in shards so concurrent encoders rarely contend.
  struct CacheShard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 4096;
  static constexpr size_t kMaxCachedWord = 256;

  Vocab vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  std::array<std::optional<int32_t>, 256> byte_ids_{};  // "<0xAB>" tokens for byte fallback
  std::unique_ptr<std::array<CacheShard, kShards>> cache_;
};

}  // namespace mlxrt::tokenizer::detail
