#pragma once
/** The state behind a Tokenizer handle: the tokenizer.json pipeline or a SentencePiece model, and
 * the configuration read beside it. Internal to the tokenizer component. */
#include <atomic>
#include <memory>

#include "mlxrt/tokenizer/added_vocabulary.h"
#include "mlxrt/tokenizer/components.h"
#include "mlxrt/tokenizer/tokenizer.h"

namespace mlxrt::tokenizer {

namespace detail {
/** A SentencePiece tokenizer.model, through libsentencepiece. */
class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special) const = 0;
  virtual std::optional<int32_t> piece_to_id(std::string_view piece) const = 0;
  virtual std::string id_to_piece(int32_t id) const = 0;
  virtual size_t size() const = 0;
  virtual bool is_control(int32_t id) const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
};
std::unique_ptr<SentencePieceBackend> load_sentencepiece(const std::filesystem::path& path);
}  // namespace detail

struct Tokenizer::Impl {
  std::unique_ptr<detail::Normalizer> normalizer;
  std::unique_ptr<detail::PreTokenizer> pre_tokenizer;
  std::unique_ptr<detail::Model> model;
  std::unique_ptr<detail::PostProcessor> post_processor;
  std::unique_ptr<detail::Decoder> decoder;
  detail::AddedVocabulary added;
  std::unique_ptr<detail::SentencePieceBackend> spm;  // set instead of the pipeline above

  TokenizerConfig config;
  StreamingKind streaming = StreamingKind::naive;
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;
  size_t vocab_size = 0;
  size_t base_vocab_size = 0;  // without added tokens
  size_t id_limit = 0;
  bool add_bos_spm = true;  // SentencePiece path: add_bos_token / add_eos_token
  bool add_eos_spm = false;
  /** Byte strings of every id as mlx-lm's SPM streaming detokenizer maps them. */
  std::vector<std::string> spm_token_bytes;
  /** transformers' deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"]:
   * the too-long warning is printed once per tokenizer. */
  mutable std::atomic<bool> warned_too_long{false};

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
};

/** Builds the pipeline from a parsed tokenizer.json (no config applied yet); `tables` holds the
 * model's vocabulary and merges when they were read beside the document (tokenizer_json_reader.h). */
std::shared_ptr<Tokenizer::Impl> parse_tokenizer_json(const nlohmann::json& doc, const std::string& source,
                                                      detail::ModelTables* tables = nullptr);
/** Fills the derived fields (vocab sizes, bos/eos ids, streaming kind) once config is set. */
void finish_impl(Tokenizer::Impl& impl, const nlohmann::json* decoder_spec);

}  // namespace mlxrt::tokenizer
