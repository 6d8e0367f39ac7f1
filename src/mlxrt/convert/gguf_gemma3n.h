#pragma once
/** Gemma 3n's text model (GGUF architecture "gemma3n") as mlx-lm's gemma3n reads it: the config
 * under text_config, the weights under model.language_model. llama.cpp's Gemma3NModel
 * (conversion/gemma.py) writes the checkpoint with these changes, undone here:
 *   - the three AltUp projections and the three unembedding projections stacked into one
 *     [3, hidden, hidden] tensor each (altup_proj, altup_unembd_proj): split back by rows;
 *   - the per-layer token embeddings padded with zero rows up to vocab_size: cut back to the
 *     published vocab_size_per_layer_input (262144) when the rows past it are all zero (mlx-lm
 *     gives the tokens past it token 0's per-layer input, not zeros);
 *   - each layer's activation sparsity s written as the standard normal quantile of s (the
 *     multiplier mlx-lm derives from it): s recovered as the normal CDF of the value;
 *   - layer_types as attention.sliding_window_pattern (one flag per layer, true: sliding);
 *   - altup.correct_output_scale named altup_correct_scale.weight; the norms (no +1 for Gemma 3n)
 *     and the AltUp coefficients in float32, widened from the checkpoint's 16-bit type.
 * The file holds neither altup_coef_clip nor altup_correct_scale (llama.cpp never clips the AltUp
 * coefficients and always scales by the tensor): the published checkpoints' values (120.0 and
 * true) are used, and every value taken that way is reported as a note. What mlx-lm's gemma3n
 * cannot express is refused, naming the key or tensor. No MLX dependency. */
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/convert/gguf_file.h"

namespace mlxrt::convert {

/** The published Gemma 3n checkpoints' values of what llama.cpp's file leaves out. */
inline constexpr uint64_t kGemma3nPerLayerVocab = 262144;  // vocab_size_per_layer_input
inline constexpr double kGemma3nCoefClip = 120.0;          // altup_coef_clip
inline constexpr uint64_t kGemma3nVocab = 262400;          // vocab_size (with 256 vision/audio tokens)

/** Turns the generic config `c` (hidden_size, heads, vocab_size, ...) into gemma3n's: those fields
 * under text_config with Gemma 3n's own. `data` is the start of the file's data section (the
 * per-layer embeddings' padding is read from it). Appends one line per value assumed to `notes`. */
void add_gemma3n_fields(nlohmann::ordered_json& c, const GgufFile& file, const uint8_t* data,
                        std::vector<std::string>& notes);

/** Where a gemma3n tensor goes (plan_tensor's answer for the architecture). */
std::optional<TensorPlan> plan_gemma3n_tensor(const GgufFile& file, const GgufTensorInfo& tensor);

/** Keeps only the first vocab_size_per_layer_input rows (config.json's) of the per-layer token
 * embeddings, dropping llama.cpp's zero padding; other tensors' plans are left as they are. */
void keep_gemma3n_per_layer_rows(TensorPlan& plan, const GgufTensorInfo& tensor, const nlohmann::ordered_json& config);

/** A layer's activation sparsity from llama.cpp's activation_sparsity_scale entry (the normal
 * quantile of the sparsity, computed in float32): the shortest decimal whose quantile is that
 * value within float32 rounding; 0 for -inf (a layer without sparsity). nullopt for NaN, +inf, or
 * a value whose sparsity is not below 1. */
std::optional<double> gemma3n_sparsity(double std_multiplier);

}  // namespace mlxrt::convert
