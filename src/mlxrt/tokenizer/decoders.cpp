// Decoders: token strings back to text, each stage rewriting the list of token strings as HF's
// decode_chain does; the caller joins the result.
#include <cstdlib>

#include "mlxrt/tokenizer/components.h"
#include "mlxrt/tokenizer/utf8.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::tokenizer::detail {
namespace {

// Token characters back to bytes; a token holding any other character is kept as its own bytes.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      size_t start = bytes.size();
      bool ok = true;
      for (size_t i = 0, len = 0; i < t.size(); i += len) {
        int b = char_to_byte(decode_at(t, i, len));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes += static_cast<char>(b);
      }
      if (!ok) {
        bytes.resize(start);
        bytes += t;
      }
    }
    tokens.assign(1, repair_utf8(bytes));
  }
};

std::optional<unsigned char> byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int h = hex(t[3]), l = hex(t[4]);
  if (h < 0 || l < 0) return std::nullopt;
  return static_cast<unsigned char>(h * 16 + l);
}

// Runs of <0xAB> tokens become their UTF-8 text, or one U+FFFD per byte when not valid UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (is_valid_utf8(pending)) out.push_back(pending);
      else
        for (size_t i = 0; i < pending_count; ++i) out.emplace_back("\xEF\xBF\xBD");
      pending.clear();
      pending_count = 0;
    };
    for (auto& t : tokens) {
      if (auto b = byte_token(t)) {
        pending += static_cast<char>(*b);
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;
      for (size_t i = 0, len = 0; i < t.size(); i += len) chars.emplace_back(i, decode_at(t, i, len));
      size_t cut_front = 0, cut_back = 0;
      while (cut_front < start_ && cut_front < chars.size() && chars[cut_front].second == content_) ++cut_front;
      while (cut_back < stop_ && cut_back < chars.size() && chars[chars.size() - 1 - cut_back].second == content_)
        ++cut_back;
      if (cut_front + cut_back >= chars.size()) {
        t.clear();
        continue;
      }
      size_t b = chars[cut_front].first;
      size_t e = cut_back == 0 ? t.size() : chars[chars.size() - cut_back].first;
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const json& spec, const std::string& where)
      : pattern_(field(spec, "pattern", where), where), content_(string_field(spec, "content", where)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      auto matches = pattern_.find_all(t);
      if (matches.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (auto [b, e] : matches) {
        out.append(t, prev, b - prev);
        out += content_;
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepend) : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t p = 0; p < t.size();) {
        if (!replacement_.empty() && t.compare(p, replacement_.size(), replacement_) == 0) {
          // The first token loses its replacement characters when a prefix space was added.
          if (!(i == 0 && prepend_)) out += ' ';
          p += replacement_.size();
        } else {
          out += t[p++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool prepend_;
};

std::string wordpiece_cleanup(std::string s) {
  static const std::pair<const char*, const char*> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : rules) {
    std::string out;
    std::string_view f(from);
    size_t prev = 0, pos;
    while ((pos = s.find(f, prev)) != std::string::npos) {
      out.append(s, prev, pos - prev);
      out += to;
      prev = pos + f.size();
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }
  return s;
}

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
        else t.insert(t.begin(), ' ');
      }
      if (cleanup_) t = wordpiece_cleanup(std::move(t));
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

size_t count_field(const json& spec, const char* key, const std::string& where) {
  const json& v = field(spec, key, where);
  if (!v.is_number_unsigned()) throw ConfigError(where + "." + key + ": must be a non-negative integer");
  return v.get<size_t>();
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  std::string type = type_of(spec, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    std::string c = string_field(spec, "content", where);
    size_t len = 0;
    if (c.empty() || !is_valid_utf8(c) || (decode_at(c, 0, len), len != c.size()))
      throw ConfigError(where + ".content: must be a single character");
    return std::make_unique<StripDecoder>(decode_at(c, 0, len), count_field(spec, "start", where),
                                          count_field(spec, "stop", where));
  }
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(spec, where);
  if (type == "Metaspace") {
    bool prepend = true;
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string())
      prepend = spec["prepend_scheme"].get<std::string>() != "never";
    else
      prepend = bool_field(spec, "add_prefix_space", true, where);
    return std::make_unique<MetaspaceDecoder>(string_field(spec, "replacement", where), prepend);
  }
  if (type == "WordPiece") {
    std::string prefix = spec.contains("prefix") ? string_field(spec, "prefix", where) : "##";
    return std::make_unique<WordPieceDecoder>(prefix, bool_field(spec, "cleanup", true, where));
  }
  if (type == "Sequence") {
    const json& list = field(spec, "decoders", where);
    if (!list.is_array()) throw ConfigError(where + ".decoders: must be a list");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto d = make_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
      if (d) parts.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  throw ConfigError(where + ": unsupported decoder type '" + type +
                    "' (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, WordPiece, Sequence)");
}

}  // namespace mlxrt::tokenizer::detail
