// Pre-tokenizers of tokenizer.json: they cut normalized text into the pieces the model sees.
// Splitting follows HF's SplitDelimiterBehavior over the list of (range, is_match) spans.
#include <utf8proc.h>

#include <algorithm>

#include "mlxrt/tokenizer/components.h"
#include "mlxrt/tokenizer/utf8.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::tokenizer::detail {
namespace {

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Behavior parse_behavior(const json& spec, const std::string& where) {
  std::string b = string_field(spec, "behavior", where);
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  throw ConfigError(where + ".behavior: unknown value '" + b +
                    "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

struct Span {
  size_t begin, end;
  bool is_match;
};

// Matches -> spans covering the whole text (HF Pattern::find_matches).
std::vector<Span> to_spans(std::string_view s, const std::vector<std::pair<size_t, size_t>>& matches, bool invert) {
  std::vector<Span> spans;
  if (s.empty()) return {{0, 0, invert}};
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size()) spans.push_back({prev, s.size(), invert});
  return spans;
}

// Applies a behaviour to the spans of one piece and appends the non-empty results to `out`.
void split_piece(const Piece& piece, std::vector<Span> spans, Behavior behavior, std::vector<Piece>& out) {
  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::removed:
      for (auto& s : spans)
        if (!s.is_match) kept.push_back(s);
      break;
    case Behavior::isolated:
      kept = std::move(spans);
      break;
    case Behavior::merged_with_previous:
      for (auto& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case Behavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().begin = it->begin;
        else kept.push_back({it->begin, it->end, false});
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Behavior::contiguous:
      for (auto& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
  }
  for (auto& s : kept) {
    if (s.end <= s.begin) continue;
    out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
}

template <typename F>
void split_all(std::vector<Piece>& pieces, F&& split_one) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (const auto& p : pieces) split_one(p, out);
  pieces = std::move(out);
}

// Spans from a per-character predicate: each run of characters is one span per char or one per run.
std::vector<std::pair<size_t, size_t>> char_matches(std::string_view s, bool (*pred)(char32_t), bool each_char) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    if (!pred(decode_at(s, i, len))) continue;
    if (!each_char && !m.empty() && m.back().second == i) m.back().second = i + len;
    else m.emplace_back(i, i + len);
  }
  return m;
}

class Split : public PreTokenizer {
 public:
  Split(const json& spec, const std::string& where)
      : pattern_(field(spec, "pattern", where), where),
        behavior_(parse_behavior(spec, where)),
        invert_(bool_field(spec, "invert", false, where)) {}
  void split(std::vector<Piece>& pieces) const override {
    split_all(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      split_piece(p, to_spans(p.text, pattern_.find_all(p.text), invert_), behavior_, out);
    });
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(const json& spec, const std::string& where)
      : add_prefix_space_(bool_field(spec, "add_prefix_space", true, where)),
        regex_(bool_field(spec, "use_regex", true, where) ? std::make_unique<Regex>(kGpt2Pattern, where) : nullptr) {
    const auto& table = byte_to_char();
    for (int b = 0; b < 256; ++b) {
      mapped_[b].clear();
      append_utf8(mapped_[b], table[b]);
    }
  }
  void split(std::vector<Piece>& pieces) const override {
    split_all(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      Piece q = p;
      if (add_prefix_space_ && (q.text.empty() || q.text[0] != ' ')) q.text.insert(q.text.begin(), ' ');
      size_t first = out.size();
      if (regex_) split_piece(q, to_spans(q.text, regex_->find_all(q.text), false), Behavior::isolated, out);
      else if (!q.text.empty()) out.push_back(std::move(q));
      for (size_t i = first; i < out.size(); ++i) out[i].text = map_bytes(out[i].text);
    });
  }

 private:
  std::string map_bytes(const std::string& s) const {
    std::string r;
    r.reserve(s.size() * 2);
    for (unsigned char b : s) r += mapped_[b];
    return r;
  }
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
  std::array<std::string, 256> mapped_;
};

enum class PrependScheme { always, first, never };

class Metaspace : public PreTokenizer {
 public:
  Metaspace(const json& spec, const std::string& where) {
    replacement_ = string_field(spec, "replacement", where);
    if (spec.contains("prepend_scheme") && !spec["prepend_scheme"].is_null()) {
      std::string s = string_field(spec, "prepend_scheme", where);
      if (s == "always") scheme_ = PrependScheme::always;
      else if (s == "first") scheme_ = PrependScheme::first;
      else if (s == "never") scheme_ = PrependScheme::never;
      else throw ConfigError(where + ".prepend_scheme: unknown value '" + s + "' (expected always, first or never)");
    } else {
      scheme_ = bool_field(spec, "add_prefix_space", true, where) ? PrependScheme::always : PrependScheme::never;
    }
    split_ = bool_field(spec, "split", true, where);
  }
  void split(std::vector<Piece>& pieces) const override {
    split_all(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      Piece q{std::string(), p.at_start};
      q.text.reserve(p.text.size() + 3);
      for (char c : p.text) {
        if (c == ' ') q.text += replacement_;
        else q.text += c;
      }
      bool starts = q.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::always || (scheme_ == PrependScheme::first && p.at_start)))
        q.text.insert(0, replacement_);
      if (!split_) {
        if (!q.text.empty()) out.push_back(std::move(q));
        return;
      }
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t pos = 0; !replacement_.empty() && (pos = q.text.find(replacement_, pos)) != std::string::npos;
           pos += replacement_.size())
        m.emplace_back(pos, pos + replacement_.size());
      split_piece(q, to_spans(q.text, m, false), Behavior::merged_with_next, out);
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_ = PrependScheme::always;
  bool split_ = true;
};

bool is_word_char(char32_t c) {
  // Rust regex \w: Alphabetic (letters, Nl), marks, decimal digits, connector punctuation, joiners.
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  // Symbols with the Other_Alphabetic property (circled and squared Latin letters).
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Whitespace: \w+|[^\w\s]+ kept, everything else dropped.
class Whitespace : public PreTokenizer {
 public:
  void split(std::vector<Piece>& pieces) const override {
    split_all(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      std::vector<std::pair<size_t, size_t>> m;
      int prev_kind = 0;  // 1 word, 2 other non-space
      for (size_t i = 0, len = 0; i < p.text.size(); i += len) {
        char32_t c = decode_at(p.text, i, len);
        int kind = is_word_char(c) ? 1 : is_whitespace(c) ? 0 : 2;
        if (kind != 0 && kind == prev_kind) m.back().second = i + len;
        else if (kind != 0) m.emplace_back(i, i + len);
        prev_kind = kind;
      }
      split_piece(p, to_spans(p.text, m, true), Behavior::removed, out);
    });
  }
};

class WhitespaceSplit : public PreTokenizer {
 public:
  void split(std::vector<Piece>& pieces) const override {
    split_all(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      split_piece(p, to_spans(p.text, char_matches(p.text, is_whitespace, false), false), Behavior::removed, out);
    });
  }
};

class Digits : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void split(std::vector<Piece>& pieces) const override {
    split_all(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      auto spans = to_spans(p.text, char_matches(p.text, is_numeric, individual_), false);
      split_piece(p, std::move(spans), individual_ ? Behavior::isolated : Behavior::contiguous, out);
    });
  }

 private:
  bool individual_;
};

class Punctuation : public PreTokenizer {
 public:
  explicit Punctuation(Behavior b) : behavior_(b) {}
  void split(std::vector<Piece>& pieces) const override {
    split_all(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      split_piece(p, to_spans(p.text, char_matches(p.text, is_punctuation, true), false), behavior_, out);
    });
  }

 private:
  Behavior behavior_;
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void split(std::vector<Piece>& pieces) const override {
    WhitespaceSplit().split(pieces);
    Punctuation(Behavior::isolated).split(pieces);
  }
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->split(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  std::string type = type_of(spec, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(spec, where);
  if (type == "Split") return std::make_unique<Split>(spec, where);
  if (type == "Metaspace") return std::make_unique<Metaspace>(spec, where);
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "Digits") return std::make_unique<Digits>(bool_field(spec, "individual_digits", false, where));
  if (type == "Punctuation") {
    Behavior b = spec.contains("behavior") ? parse_behavior(spec, where) : Behavior::isolated;
    return std::make_unique<Punctuation>(b);
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Sequence") {
    const json& list = field(spec, "pretokenizers", where);
    if (!list.is_array()) throw ConfigError(where + ".pretokenizers: must be a list");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequencePre>(std::move(parts));
  }
  throw ConfigError(where + ": unsupported pre-tokenizer type '" + type +
                    "' (supported: ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits, Punctuation, "
                    "BertPreTokenizer, Sequence)");
}

}  // namespace mlxrt::tokenizer::detail
