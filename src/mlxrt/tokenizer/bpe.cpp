#include "mlxrt/tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "mlxrt/tokenizer/utf8.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::tokenizer::detail {

void Vocab::add(std::string token, int32_t id) {
  if (id < 0) return;
  if (static_cast<size_t>(id) >= tokens_.size()) {
    tokens_.resize(static_cast<size_t>(id) + 1);
    present_.resize(static_cast<size_t>(id) + 1, false);
  }
  tokens_[id] = token;
  present_[id] = true;
  ids_[std::move(token)] = id;
}

Bpe::Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
         const std::string& where)
    : vocab_(std::move(vocab)), options_(std::move(options)), cache_(std::make_unique<std::array<CacheShard, kShards>>()) {
  size_t prefix_len = options_.continuing_subword_prefix ? options_.continuing_subword_prefix->size() : 0;
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : std::string());
    auto in = vocab_.find(merged);
    if (!ia || !ib || !in)
      throw ConfigError(where + ".merges[" + std::to_string(rank) + "]: merge '" + a + " " + b +
                        "' uses a token missing from the vocabulary");
    merges_[pair_key(*ia, *ib)] = Merge{static_cast<uint32_t>(rank), *in};
  }
  if (options_.unk_token) {
    unk_id_ = vocab_.find(*options_.unk_token);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[b] = vocab_.find(name);
  }
}

// One symbol per character (with prefix / suffix), byte tokens or unk where the vocabulary has no
// entry; the same rules as HF's BPE::merge_word.
void Bpe::initial_symbols(std::string_view w, std::vector<int32_t>& ids) const {
  std::optional<std::pair<int32_t, uint32_t>> unk;
  std::string buf;
  for (size_t i = 0, len = 0; i < w.size(); i += len) {
    len = char_len(static_cast<unsigned char>(w[i]));
    bool first = i == 0, last = i + len >= w.size();
    std::string_view s = w.substr(i, len);
    if ((!first && options_.continuing_subword_prefix) || (last && options_.end_of_word_suffix)) {
      buf.clear();
      if (!first && options_.continuing_subword_prefix) buf += *options_.continuing_subword_prefix;
      buf += s;
      if (last && options_.end_of_word_suffix) buf += *options_.end_of_word_suffix;
      s = buf;
    }
    if (auto id = vocab_.find(s)) {
      if (unk) {
        ids.push_back(unk->first);
        unk.reset();
      }
      ids.push_back(*id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_ids_[b].has_value();
      if (all) {
        for (unsigned char b : s) {
          ids.push_back(*byte_ids_[b]);
        }
        continue;
      }
    }
    if (options_.unk_token) {
      if (!unk_id_)
        throw ConfigError("tokenizer.json: model.unk_token '" + *options_.unk_token + "' is not in the vocabulary");
      if (unk && options_.fuse_unk) {
        unk->second += static_cast<uint32_t>(len);
      } else {
        if (unk) {
          ids.push_back(unk->first);
        }
        unk = std::make_pair(*unk_id_, static_cast<uint32_t>(len));
      }
    }
  }
  if (unk) {
    ids.push_back(unk->first);
  }
}

// Repeatedly applies the lowest-ranked merge (leftmost on ties), with a heap of candidate pairs
// over a linked list of symbols: O(n log n) per word.
void Bpe::merge_all(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Cand {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    int32_t nx = next[pos];
    if (nx < 0) return;
    auto it = merges_.find(pair_key(ids[pos], ids[nx]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.new_id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    if (dead[c.pos]) continue;
    int32_t nx = next[c.pos];
    if (nx < 0) continue;
    // Skip entries made stale by an earlier merge of either side.
    auto it = merges_.find(pair_key(ids[c.pos], ids[nx]));
    if (it == merges_.end() || it->second.new_id != c.new_id || it->second.rank != c.rank) continue;
    ids[c.pos] = c.new_id;
    dead[nx] = true;
    next[c.pos] = next[nx];
    if (next[nx] >= 0) prev[next[nx]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  size_t k = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) ids[k++] = ids[i];
  ids.resize(k);
}

void Bpe::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = vocab_.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  bool cacheable = piece.size() < kMaxCachedWord * 4;
  CacheShard& shard = (*cache_)[StringHash{}(piece) % kShards];
  if (cacheable) {
    std::lock_guard lock(shard.mutex);
    auto it = shard.map.find(piece);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  initial_symbols(piece, ids);
  merge_all(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() < kShardCapacity) shard.map.emplace(std::string(piece), std::move(ids));
  }
}

}  // namespace mlxrt::tokenizer::detail
