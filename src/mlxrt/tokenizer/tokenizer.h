#pragma once
/** The tokenizer: text to token ids and back, byte-for-byte as Hugging Face `tokenizers` does it.
 *
 * Loads tokenizer.json (BPE incl. byte-level and byte_fallback, WordPiece, WordLevel), or without it
 * vocab.json + merges.txt (GPT-2 style) or a SentencePiece tokenizer.model; plus tokenizer_config.json
 * and generation_config.json / config.json for special tokens, eos lists and chat templates, merged as
 * mlx-lm's TokenizerWrapper merges them.
 *
 * A Tokenizer is a cheap handle on immutable shared state: copy or move it freely; const methods
 * may be called from many threads at once. */
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxrt::tokenizer {

/** Settings from tokenizer_config.json (+ generation_config.json, config.json) as mlx-lm sees them. */
struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  /** tokenizer_config.json add_bos_token / add_eos_token when present (informational: encode()
   * follows the post-processor of tokenizer.json as HF does). */
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  /** transformers' clean_up_tokenization_spaces (used by the naive streaming detokenizer only). */
  bool clean_up_tokenization_spaces = false;
  /** null, a template string, or a list of {"name": ..., "template": ...} objects; a separate
   * chat_template.jinja (or chat_template.json) in the directory takes precedence, as in transformers. */
  nlohmann::json chat_template;
  /** eos ids: generation_config.json's eos_token_id (else config.json's), int or list, as given. */
  std::vector<int32_t> eos_token_ids;
  /** The whole tokenizer_config.json object ({} when absent), for fields not listed above. */
  nlohmann::json raw = nlohmann::json::object();
};

/** How mlx-lm streams text for this tokenizer (picked from the tokenizer.json decoder). */
enum class StreamingKind { naive, spm, spm_no_trim, bpe };

class StreamingDetokenizer;

class Tokenizer {
 public:
  /** Loads a directory: tokenizer.json, else vocab.json + merges.txt, else tokenizer.model.
   * ConfigError names the file and field when something is missing or malformed;
   * UnsupportedError names an unknown model/normalizer/pre-tokenizer/decoder type. */
  static Tokenizer from_dir(const std::filesystem::path& dir);
  /** Parses a tokenizer.json document (no side files); `source` names it in error messages. */
  static Tokenizer from_json_text(std::string_view tokenizer_json, const std::string& source = "tokenizer.json");

  /** HF `Tokenizer.encode(text, add_special_tokens)`. Invalid UTF-8 is first replaced by U+FFFD per
   * maximal ill-formed subsequence (what Python's bytes.decode("utf-8", "replace") gives). */
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /** HF `Tokenizer.decode(ids, skip_special_tokens)`; ids outside the vocabulary are dropped. */
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  /** The token string, "" for an id not in the vocabulary. */
  std::string id_to_token(int32_t id) const;
  /** Distinct tokens including added ones (HF get_vocab_size(with_added_tokens=True)). */
  size_t vocab_size() const;
  /** The vocabulary without added tokens (transformers' `tokenizer.vocab_size`). */
  size_t base_vocab_size() const;
  /** One past the largest id in use (what a token map indexed by id needs). */
  size_t id_limit() const;

  std::optional<int32_t> bos_token_id() const;
  /** The eos ids mlx-lm stops on: config eos ids plus the tokenizer's eos_token, deduplicated. */
  std::vector<int32_t> eos_token_ids() const;
  const TokenizerConfig& config() const;
  /** An added token marked special (what skip_special_tokens skips). */
  bool is_special(int32_t id) const;

  StreamingKind streaming_kind() const;
  /** A fresh streaming detokenizer of the kind mlx-lm would choose. */
  StreamingDetokenizer streaming_detokenizer() const;

  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

/** Token-by-token text with mlx-lm's semantics (NaiveStreamingDetokenizer, SPMStreamingDetokenizer,
 * BPEStreamingDetokenizer): text is released only once it is complete UTF-8; after finalize() the
 * concatenated segments equal what mlx-lm's detokenizer.text holds for the same ids. One per
 * request (not thread-safe); it keeps its Tokenizer alive. */
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(Tokenizer tokenizer);
  StreamingDetokenizer(Tokenizer tokenizer, StreamingKind kind);

  void reset();
  void add_token(int32_t id);
  /** The readable text produced since the last call (mlx-lm's last_segment). */
  std::string take_segment();
  /** Flushes text held back waiting for more tokens. */
  void finalize();
  /** All text so far. */
  std::string text();
  const std::vector<int32_t>& tokens() const { return tokens_; }
  StreamingKind kind() const { return kind_; }

 private:
  void refresh_naive();
  void flush_spm(bool force);

  Tokenizer tokenizer_;
  StreamingKind kind_;
  std::vector<int32_t> tokens_;
  std::string text_;       // committed text
  size_t offset_ = 0;      // bytes of text already handed out by take_segment
  std::string unflushed_;  // spm: raw bytes; bpe: byte-level token characters
  std::vector<int32_t> current_tokens_;  // naive: tokens since the last newline
  std::string current_text_;             // naive: their decoded text
  bool naive_clean_spaces_ = false;
};

}  // namespace mlxrt::tokenizer
