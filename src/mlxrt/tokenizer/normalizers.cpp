// Normalizers of tokenizer.json: Unicode forms through utf8proc, case folding, replacement, and
// the Sequence that chains them. Each works on the whole piece in place.
#include <utf8proc.h>

#include <cstdlib>

#include "mlxrt/tokenizer/components.h"
#include "mlxrt/tokenizer/utf8.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::tokenizer::detail {
namespace {

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(utf8proc_option_t options) : options_(options) {}
  void normalize(std::string& s) const override {
    if (is_ascii(s)) return;  // every form leaves ASCII unchanged
    utf8proc_uint8_t* out = nullptr;
    auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                          &out, static_cast<utf8proc_option_t>(options_ | UTF8PROC_STABLE));
    if (n < 0) return;  // input is valid UTF-8 here, so this does not happen; keep the text as is
    s.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  utf8proc_option_t options_;
};

void lowercase(std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    char32_t c = decode_at(s, i, len);
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
      out += "i\xCC\x87";
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  s = std::move(out);
}

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& s) const override { lowercase(s); }
};

class Replace : public Normalizer {
 public:
  Replace(const json& spec, const std::string& where)
      : pattern_(field(spec, "pattern", where), where), content_(string_field(spec, "content", where)) {}
  void normalize(std::string& s) const override {
    auto matches = pattern_.find_all(s);
    if (matches.empty()) return;
    std::string out;
    out.reserve(s.size());
    size_t prev = 0;
    for (auto [b, e] : matches) {
      out.append(s, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      for (size_t len = 0; b < e; b += len)
        if (!is_whitespace(decode_at(s, b, len))) break;
    }
    if (right_) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t len = 0;
        if (!is_whitespace(decode_at(s, start, len))) break;
        e = start;
      }
    }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

bool is_combining_mark(char32_t c) {
  auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

void strip_accents(std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0, len = 0; i < s.size(); i += len)
    if (!is_combining_mark(decode_at(s, i, len))) out.append(s, i, len);
  s = std::move(out);
}

class StripAccents : public Normalizer {
 public:
  void normalize(std::string& s) const override { strip_accents(s); }
};

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// BERT's cleaning: drop NUL, U+FFFD and control characters, turn any whitespace into a space.
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(const json& spec, const std::string& where)
      : clean_text_(bool_field(spec, "clean_text", true, where)),
        chinese_(bool_field(spec, "handle_chinese_chars", true, where)),
        lowercase_(bool_field(spec, "lowercase", true, where)),
        strip_accents_(bool_field(spec, "strip_accents", lowercase_, where)) {}

  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
      char32_t c = decode_at(s, i, len);
      if (clean_text_) {
        if (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && is_bert_control(c))) continue;
        if (is_whitespace(c)) {
          out += ' ';
          continue;
        }
      }
      if (chinese_ && is_chinese_char(c)) {
        out += ' ';
        out.append(s, i, len);
        out += ' ';
        continue;
      }
      out.append(s, i, len);
    }
    if (strip_accents_) {  // BERT strips nonspacing marks only (StripAccents strips all marks)
      UnicodeForm(UTF8PROC_DECOMPOSE).normalize(out);
      std::string kept;
      for (size_t i = 0, len = 0; i < out.size(); i += len)
        if (!is_nonspacing_mark(decode_at(out, i, len))) kept.append(out, i, len);
      out = std::move(kept);
    }
    if (lowercase_) lowercase(out);
    s = std::move(out);
  }

 private:
  static bool is_bert_control(char32_t c) {
    auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    // HF's category tables leave unassigned code points (Cn) out of "other".
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO;
  }
  bool clean_text_, chinese_, lowercase_, strip_accents_;
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char b : s) append_utf8(out, byte_to_char()[b]);
    s = std::move(out);
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  std::string type = type_of(spec, where);
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD") return std::make_unique<UnicodeForm>(static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Replace") return std::make_unique<Replace>(spec, where);
  if (type == "Prepend") return std::make_unique<Prepend>(string_field(spec, "prepend", where));
  if (type == "Strip")
    return std::make_unique<Strip>(bool_field(spec, "strip_left", false, where),
                                   bool_field(spec, "strip_right", false, where));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "BertNormalizer") return std::make_unique<BertNormalizer>(spec, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Sequence") {
    const json& list = field(spec, "normalizers", where);
    if (!list.is_array()) throw ConfigError(where + ".normalizers: must be a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto n = make_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
      if (n) parts.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  throw ConfigError(where + ": unsupported normalizer type '" + type +
                         "' (supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, StripAccents, "
                         "BertNormalizer, ByteLevel, Sequence)");
}

}  // namespace mlxrt::tokenizer::detail
