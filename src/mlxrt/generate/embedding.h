#pragma once
/** Sentence embeddings from a decoder: the hidden states mlx-lm's `model.model(...)` returns (after
 * the final norm, before the head), pooled over the sequence as the checkpoint's
 * sentence-transformers config says (modules.json, the Pooling module's config.json, a Normalize
 * module), optionally truncated to fewer dimensions (OpenAI's `dimensions`: truncated first, then
 * normalised when the model normalises), as float32.
 *
 * Each input runs alone, unpadded ([1, L]), so no padding side or attention mask enters the
 * numbers; the tokens are the tokenizer's own encoding with its special tokens (a checkpoint whose
 * post-processor appends an end-of-text token, as Qwen3-Embedding's does, gets it here too). */
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/model/causal_lm.h"

namespace mlxrt::generate {

namespace mx = mlx::core;

/** sentence-transformers' pooling modes that are read here. */
enum class Pooling { last_token, mean };

const char* pooling_name(Pooling p);
/** "last" / "lasttoken" / "mean" -> Pooling; UsageError naming `what` otherwise. */
Pooling parse_pooling(const std::string& name, const std::string& what);

struct EmbeddingConfig {
  Pooling pooling = Pooling::last_token;
  bool normalize = true;
  /** The pooled vector's width when the checkpoint declares it (the Pooling module's
   * word_embedding_dimension, else config.json's hidden_size). */
  std::optional<int> width;
  /** Where the pooling came from, for messages ("modules.json" or "default"). */
  std::string source = "default";
};

/** Reads the sentence-transformers config in `model_dir`. Without modules.json: last-token pooling,
 * normalised (what decoder embedding models use). ConfigError naming the file for malformed JSON or
 * fields of the wrong type; UnsupportedError for modules or pooling modes other than Transformer,
 * Pooling (lasttoken or mean_tokens, one of them) and Normalize. */
EmbeddingConfig read_embedding_config(const std::filesystem::path& model_dir);

/** One input's embedding, float32 [D] (D = `dimensions` when given): h = model.hidden_states of
 * tokens [1, L]; last token h[0, -1] or mean(h[0], axis=0); v[:dimensions]; when normalising
 * v / maximum(linalg.norm(v), 1e-12) (sentence-transformers' Normalize, eps 1e-12); astype
 * float32. The ops run in the hidden states' dtype until the final cast. UsageError for an empty
 * token list, ids outside the embedding table, or dimensions outside 1..width. */
mx::array embed_tokens(model::CausalLM& model, const std::vector<int32_t>& tokens, const EmbeddingConfig& config,
                       std::optional<int> dimensions = std::nullopt);

/** The float32 vector as host values (evaluates it). */
std::vector<float> to_floats(const mx::array& v);

/** base64 of the vector's float32 bytes, little-endian (OpenAI's encoding_format "base64"). */
std::string floats_base64(const std::vector<float>& v);

}  // namespace mlxrt::generate
