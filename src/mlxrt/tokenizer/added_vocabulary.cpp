#include "mlxrt/tokenizer/added_vocabulary.h"

#include "mlxrt/tokenizer/utf8.h"

namespace mlxrt::tokenizer::detail {

void AddedVocabulary::Trie::insert(std::string_view s, int32_t token_index) {
  if (terminal.empty()) terminal.push_back(-1);
  int32_t node = 0;
  for (unsigned char b : s) {
    uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    auto it = children.find(key);
    if (it == children.end()) {
      int32_t child = static_cast<int32_t>(terminal.size());
      terminal.push_back(-1);
      it = children.emplace(key, child).first;
    }
    node = it->second;
  }
  if (terminal[node] < 0) terminal[node] = token_index;  // the first of duplicate contents wins
  first_byte[static_cast<unsigned char>(s[0])] = true;
}

std::pair<size_t, int32_t> AddedVocabulary::Trie::longest_at(std::string_view s, size_t pos) const {
  std::pair<size_t, int32_t> best{pos, -1};
  if (terminal.empty() || !first_byte[static_cast<unsigned char>(s[pos])]) return best;
  int32_t node = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    auto it = children.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(s[i]));
    if (it == children.end()) break;
    node = it->second;
    if (terminal[node] >= 0) best = {i + 1, terminal[node]};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    AddedToken& t = tokens_[i];
    t.surface = t.content;
    by_content_[t.content] = t.id;
    by_id_[t.id] = i;
    if (t.special) special_contents_.insert(t.content);
    if (t.content.empty()) continue;
    if (t.normalized) {
      std::string pattern = t.content;
      if (normalizer) normalizer->normalize(pattern);
      t.surface = pattern;
      if (!pattern.empty()) normalized_.insert(pattern, static_cast<int32_t>(i));
    } else {
      raw_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::find(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

namespace {

char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return decode_at(s, i, len);
}

bool is_word(char32_t c) { return c == '_' || is_alphanumeric(c); }

}  // namespace

void AddedVocabulary::split(const Segment& in, bool normalized, std::vector<Segment>& out) const {
  const Trie& trie = normalized ? normalized_ : raw_;
  const std::string& s = in.text;
  auto emit_text = [&](size_t b, size_t e) {
    if (e > b) out.push_back({s.substr(b, e - b), std::nullopt, in.at_start && b == 0});
  };
  if (trie.terminal.empty()) {
    emit_text(0, s.size());
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    auto [end, index] = trie.longest_at(s, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t match_begin = pos;
    pos = end;  // the next search starts after this match, whatever stripping does below
    const AddedToken& t = tokens_[index];
    size_t start = match_begin, stop = end;
    if (t.single_word) {
      bool start_ok = start == 0 || !is_word(last_char(std::string_view(s).substr(0, start)));
      size_t len = 0;
      bool stop_ok = stop == s.size() || !is_word(decode_at(s, stop, len));
      if (!start_ok || !stop_ok) continue;  // HF's matcher still resumes after this match
    }
    if (t.lstrip) {
      size_t b = start;
      while (b > 0) {
        size_t k = b - 1;
        while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t len = 0;
        if (!is_whitespace(decode_at(s, k, len))) break;
        b = k;
      }
      start = std::max(b, start_offset);
    }
    if (t.rstrip) {
      size_t len = 0;
      while (stop < s.size() && is_whitespace(decode_at(s, stop, len))) stop += len;
    }
    if (start_offset < start) emit_text(start_offset, start);
    out.push_back({std::string(), t.id, false});
    start_offset = stop;
  }
  if (start_offset < s.size()) emit_text(start_offset, s.size());
}

}  // namespace mlxrt::tokenizer::detail
