#pragma once
/** Qwen3-Next and Qwen3.5's gated delta nets as the checkpoint holds them. llama.cpp's converter
 * (Qwen3NextModel and _LinearAttentionVReorderBase in its conversion/qwen.py) reshapes their
 * tensors for ggml: A_log written as -exp(A_log), Qwen3-Next's in_proj_qkvz split into attn_qkv
 * (its query, key and value heads de-interleaved) and attn_gate, and Qwen3.5's value heads
 * reordered from grouped by key head to tiled. This undoes each step on the converted arrays of
 * one shard (plan_tensor keeps a layer's tensors in one shard), exactly: rows and columns move,
 * values do not change, except A_log, whose float32 is chosen so that MLX's exp gives the file's A. */
#include <string>
#include <unordered_map>

#include <mlx/array.h>

#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/convert/gguf_file.h"

namespace mlxrt::convert {

/** Rewrites the gated delta layers' arrays in place (names as plan_tensor gave them). */
void restore_gated_delta_layers(const GgufArchitecture& arch, const GgufFile& file,
                                std::unordered_map<std::string, mlx::core::array>& arrays);

/** A_log from llama.cpp's A = -exp(A_log) (float32): per value, the float32 nearest log(-A) whose
 * exp, as MLX computes it, is -A exactly when one within a few ulps has it, else log(-A) itself. */
mlx::core::array a_log_from_a(const mlx::core::array& a);

}  // namespace mlxrt::convert
