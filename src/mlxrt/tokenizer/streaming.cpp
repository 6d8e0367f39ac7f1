// Streaming detokenizers with mlx-lm's semantics (mlx_lm/tokenizer_utils.py): the naive one
// re-decodes the tokens since the last newline, the SPM one flushes on complete UTF-8 with "▁" as
// space, the BPE one maps byte-level characters back to bytes.
#include "mlxrt/tokenizer/components.h"
#include "mlxrt/tokenizer/tokenizer_impl.h"
#include "mlxrt/tokenizer/utf8.h"

namespace mlxrt::tokenizer {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";
const std::string kSpmSpace = "\xE2\x96\x81";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  std::string out;
  size_t prev = 0, pos;
  while ((pos = s.find(from, prev)) != std::string::npos) {
    out.append(s, prev, pos - prev);
    out += to;
    prev = pos + from.size();
  }
  out.append(s, prev, std::string::npos);
  return out;
}

// transformers' clean_up_tokenization, applied by its decode when the config asks for it.
std::string clean_up_tokenization(std::string s) {
  static const std::pair<const char*, const char*> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : rules) s = replace_all(std::move(s), from, to);
  return s;
}

std::string transformers_decode(const Tokenizer& t, std::span<const int32_t> ids) {
  std::string s = t.decode(ids);
  return t.config().clean_up_tokenization_spaces ? clean_up_tokenization(std::move(s)) : s;
}

// Byte-level characters back to bytes the way BPEStreamingDetokenizer._decode_bytes does, including
// its treatment of byte 0 (a falsy lookup result) as "not a byte character".
std::string bpe_stream_bytes(const std::string& chars, bool zero_is_byte) {
  std::string bytes;
  for (size_t i = 0, len = 0; i < chars.size(); i += len) {
    char32_t c = detail::decode_at(chars, i, len);
    int b = detail::char_to_byte(c);
    if (b > 0 || (b == 0 && zero_is_byte)) bytes += static_cast<char>(b);
    else bytes.append(chars, i, len);
  }
  return detail::repair_utf8(bytes);
}

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer)
    : StreamingDetokenizer(tokenizer, tokenizer.streaming_kind()) {}

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer, StreamingKind kind)
    : tokenizer_(std::move(tokenizer)), kind_(kind) {
  if ((kind_ == StreamingKind::spm || kind_ == StreamingKind::spm_no_trim) && tokenizer_.impl().spm_token_bytes.empty())
    kind_ = StreamingKind::naive;  // no SPM token map for this tokenizer
  if (kind_ == StreamingKind::naive) {
    auto probe = tokenizer_.encode("a ,b", false);
    naive_clean_spaces_ = transformers_decode(tokenizer_, probe).find(" ,") == std::string::npos;
  }
}

void StreamingDetokenizer::reset() {
  tokens_.clear();
  text_.clear();
  offset_ = 0;
  unflushed_.clear();
  current_tokens_.clear();
  current_text_.clear();
}

void StreamingDetokenizer::add_token(int32_t id) {
  tokens_.push_back(id);
  switch (kind_) {
    case StreamingKind::naive:
      current_tokens_.push_back(id);
      break;
    case StreamingKind::spm:
    case StreamingKind::spm_no_trim: {
      const auto& map = tokenizer_.impl().spm_token_bytes;
      if (id >= 0 && static_cast<size_t>(id) < map.size()) unflushed_ += map[id];
      flush_spm(false);
      break;
    }
    case StreamingKind::bpe: {
      std::string v = id >= 0 && static_cast<size_t>(id) < tokenizer_.id_limit() ? tokenizer_.id_to_token(id) : "!";
      unflushed_ += v;
      std::string text = bpe_stream_bytes(unflushed_, false);
      size_t len = 0;
      bool lone_space = !v.empty() && detail::char_len(static_cast<unsigned char>(v[0])) == v.size() &&
                        detail::char_to_byte(detail::decode_at(v, 0, len)) == 32;
      // Wait for multi-byte characters to complete, and for the token after a lone space.
      if (!ends_with(text, kReplacement) && !lone_space) {
        if (text_.empty() && !text.empty() && text[0] == ' ') text.erase(0, 1);
        text_ += text;
        unflushed_.clear();
      }
      break;
    }
  }
}

void StreamingDetokenizer::flush_spm(bool force) {
  std::string text = detail::repair_utf8(replace_all(unflushed_, kSpmSpace, " "));
  if (!force && ends_with(text, kReplacement)) return;
  if (text_.empty() && kind_ == StreamingKind::spm && !text.empty() && text[0] == ' ') text.erase(0, 1);
  text_ += text;
  unflushed_.clear();
}

void StreamingDetokenizer::refresh_naive() {
  if (!current_tokens_.empty()) {
    current_text_ = transformers_decode(tokenizer_, current_tokens_);
    if (ends_with(current_text_, kReplacement)) {
      while (ends_with(current_text_, kReplacement)) current_text_.resize(current_text_.size() - kReplacement.size());
    } else if (naive_clean_spaces_ && !current_text_.empty() && current_text_.back() == ' ') {
      current_text_.pop_back();
    }
  }
  if (!current_text_.empty() && current_text_.back() == '\n') {
    text_ += current_text_;
    current_tokens_.clear();
    current_text_.clear();
  }
}

void StreamingDetokenizer::finalize() {
  switch (kind_) {
    case StreamingKind::naive:
      text_ += transformers_decode(tokenizer_, current_tokens_);
      current_tokens_.clear();
      current_text_.clear();
      break;
    case StreamingKind::spm:
    case StreamingKind::spm_no_trim:
      flush_spm(true);
      break;
    case StreamingKind::bpe: {
      std::string text = bpe_stream_bytes(unflushed_, true);
      if (text_.empty() && !text.empty() && text[0] == ' ') text.erase(0, 1);
      text_ += text;
      unflushed_.clear();
      break;
    }
  }
}

std::string StreamingDetokenizer::text() {
  if (kind_ != StreamingKind::naive) return text_;
  refresh_naive();
  return text_ + current_text_;
}

std::string StreamingDetokenizer::take_segment() {
  std::string all = text();
  std::string segment = offset_ < all.size() ? all.substr(offset_) : std::string();
  offset_ = all.size();
  return segment;
}

}  // namespace mlxrt::tokenizer
