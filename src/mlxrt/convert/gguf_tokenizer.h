#pragma once
/** The tokenizer a GGUF file describes (llama.cpp's tokenizer.ggml.* metadata), written as the
 * Hugging Face files an MLX checkpoint carries: tokenizer.json, tokenizer_config.json and
 * generation_config.json. No MLX dependency.
 *
 *   tokenizer.ggml.model "gpt2":  byte-level BPE with the file's merges; the pre-tokenizer is the
 *                                 one llama.cpp uses for tokenizer.ggml.pre (see gguf_tokenizer.cpp).
 *   tokenizer.ggml.model "llama": SentencePiece-style BPE with byte fallback, merges recovered from
 *                                 the piece scores, "▁" for spaces.
 *   tokenizer.ggml.model "gemma4": BPE with byte fallback and the file's merges over "▁"-for-space
 *                                 text cut into newline runs and the rest, as llama.cpp runs it. */
#include <nlohmann/json.hpp>

#include "mlxrt/convert/gguf_file.h"

namespace mlxrt::convert {

struct TokenizerFiles {
  nlohmann::json tokenizer;                  // tokenizer.json (keys sorted: the vocabulary is large)
  nlohmann::ordered_json tokenizer_config;   // tokenizer_config.json
  nlohmann::ordered_json generation_config;  // generation_config.json
};

/** Builds the three files; ConfigError / UnsupportedError name the file and the metadata key. */
TokenizerFiles build_tokenizer_files(const GgufFile& file);

/** Whether the file has a tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens). */
bool has_tokenizer(const GgufFile& file);

}  // namespace mlxrt::convert
