#pragma once
/** Rotary position embeddings as mlx-lm's initialize_rope builds them (rope_utils.py): default,
 * linear, dynamic, llama3, yarn, longrope, mrope (for text positions a plain RoPE), proportional. Frequencies are
 * computed with MLX ops in float32, exactly as the reference computes them, so the rotated values
 * match bit for bit. */
#include <memory>
#include <optional>
#include <string>

#include <mlx/array.h>
#include <nlohmann/json.hpp>

namespace mlxrt::kernels::cpu {
class CpuKernels;
}

namespace mlxrt::model::nn {

namespace mx = mlx::core;

class Rope {
 public:
  /** initialize_rope(dims, base, traditional, scaling_config, max_position_embeddings).
   * `scaling` is the config's rope_scaling object or null; `source` names it in errors. */
  static Rope initialize(int dims, double base, bool traditional, const nlohmann::json& scaling,
                         std::optional<int> max_position_embeddings, const std::string& source);

  /** SuScaledRoPE(dims, base, max_position_embeddings, original_max_position_embeddings,
   * long_factor=..., long_mscale=...) as a model constructs it directly (phi3.py passes the
   * config's top-level position counts). Only the long factors enter the frequencies, as there;
   * `long_mscale` 0 means none. */
  static Rope su_scaled(int dims, double base, double max_positions, double original_max_positions,
                        const nlohmann::json& long_factor, double long_mscale, const std::string& source);

  /** fast::rope over precomputed `freqs` (scale 1), as a model builds one of its own
   * (hunyuan_v1_dense's DynamicNTKAlphaRoPE); `type` names it. */
  static Rope with_freqs(int dims, bool traditional, mx::array freqs, const std::string& type);

  mx::array operator()(const mx::array& x, int offset) const;
  /** One offset per batch row ([B] int32), as mlx-lm passes a BatchKVCache's offset to its RoPE
   * module. Not for "dynamic", whose base depends on one sequence length (see takes_offset_array). */
  mx::array operator()(const mx::array& x, const mx::array& offset) const;
  /** Whether operator()(x, offset array) applies: every variant but dynamic NTK. */
  bool takes_offset_array() const { return type_ != "dynamic"; }

  /** The rope variant's name ("default", "linear", "llama3", ...), for profiles and logs. */
  const std::string& type() const { return type_; }

  /** The fast::rope call operator()(x, offset) makes, where it is that call alone (not dynamic NTK,
   * no scaling of x first): for the fused L3 blocks, which rotate inside their own node. */
  struct FastCall {
    int dims;
    bool traditional;
    std::optional<float> base;
    float scale;
    std::optional<mx::array> freqs;
  };
  std::optional<FastCall> fast_call() const {
    if (type_ == "dynamic" || input_scale_ || (!freqs_ && !base_)) return std::nullopt;
    if (freqs_) return FastCall{dims_, traditional_, std::nullopt, scale_, freqs_};
    return FastCall{dims_, traditional_, base_, scale_, std::nullopt};
  }

  /** The CPU kernels of the model: at --fidelity l3, one offset runs the fused L3 RoPE. */
  void set_cpu_kernels(std::shared_ptr<const kernels::cpu::CpuKernels> k) { cpu_ = std::move(k); }

 private:
  Rope() = default;
  std::string type_ = "default";
  int dims_ = 0;
  bool traditional_ = false;
  std::optional<float> base_;           // nn.RoPE / dynamic: the base; freqs variants: none
  float scale_ = 1.0f;                  // position scale passed to fast::rope
  std::optional<mx::array> freqs_;      // llama3, yarn, longrope
  std::optional<double> input_scale_;   // yarn mscale / longrope scale on x[..., :dims]
  // dynamic NTK: base recomputed from the sequence length at each call
  double dynamic_base_ = 0, dynamic_factor_ = 1;
  int dynamic_max_positions_ = 0;
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_;
};

}  // namespace mlxrt::model::nn
