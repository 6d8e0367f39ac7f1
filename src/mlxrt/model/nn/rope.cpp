// Port of mlx_lm/models/rope_utils.py (mlx-lm 0.32.2) and mlx.nn.RoPE (mlx 0.32.4).
#include "mlxrt/model/nn/rope.h"

#include <cmath>
#include <stdexcept>

#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/kernels/cpu/l3_fused.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::nn {

namespace {

using nlohmann::json;

// A Python float scalar in an MLX op takes the array's dtype (here float32).
mx::array f32(double v) { return mx::array(static_cast<float>(v)); }

double number(const json& cfg, const char* key, const std::string& source) {
  if (!cfg.contains(key) || !cfg[key].is_number())
    throw ConfigError(source + ": rope_scaling." + key + " is required and must be a number");
  return cfg[key].get<double>();
}

double number_or(const json& cfg, const char* key, double fallback, const std::string& source) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  if (!cfg[key].is_number()) throw ConfigError(source + ": rope_scaling." + key + " must be a number");
  return cfg[key].get<double>();
}

// base ** (mx.arange(0, dims, 2, dtype=mx.float32) / dims)
mx::array base_freqs(double base, int dims) {
  return mx::power(f32(base), mx::divide(mx::arange(0, dims, 2, mx::float32), f32(dims)));
}

mx::array llama3_freqs(int dims, double base, const json& cfg, const std::string& source) {
  double factor = number(cfg, "factor", source);
  double low_freq_factor = number_or(cfg, "low_freq_factor", 1.0, source);
  double high_freq_factor = number_or(cfg, "high_freq_factor", 4.0, source);
  double old_context_len = number_or(cfg, "original_max_position_embeddings", 8192, source);
  double low_freq_wavelen = old_context_len / low_freq_factor;
  double high_freq_wavelen = old_context_len / high_freq_factor;

  // mx.arange(0, dims, 2) is int32; dividing by an int promotes to float32.
  auto freqs = mx::power(f32(base), mx::divide(mx::arange(0, dims, 2, mx::int32), mx::array(dims)));
  auto wavelens = mx::multiply(f32(2 * M_PI), freqs);
  freqs = mx::where(mx::greater(wavelens, f32(low_freq_wavelen)), mx::multiply(freqs, f32(factor)), freqs);
  auto is_medium = mx::logical_and(mx::greater(wavelens, f32(high_freq_wavelen)),
                                   mx::less(wavelens, f32(low_freq_wavelen)));
  auto smooth_factors = mx::divide(mx::subtract(mx::divide(f32(old_context_len), wavelens), f32(low_freq_factor)),
                                   f32(high_freq_factor - low_freq_factor));
  auto smooth_freqs = mx::divide(
      freqs, mx::add(mx::divide(mx::subtract(f32(1), smooth_factors), f32(factor)), smooth_factors));
  return mx::where(is_medium, smooth_freqs, freqs);
}

struct Yarn {
  mx::array freqs;
  double mscale;
};

Yarn yarn(int dims, double base, const json& cfg, const std::string& source) {
  double scaling_factor = number(cfg, "factor", source);
  double original = number_or(cfg, "original_max_position_embeddings", 4096, source);
  double beta_fast = number_or(cfg, "beta_fast", 32, source);
  double beta_slow = number_or(cfg, "beta_slow", 1, source);
  double mscale = number_or(cfg, "mscale", 1, source);
  double mscale_all_dim = number_or(cfg, "mscale_all_dim", 0, source);

  auto correction_dim = [&](double rotations) {
    return (dims * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  long low = std::max<long>(static_cast<long>(std::floor(correction_dim(beta_fast))), 0);
  long high = std::min<long>(static_cast<long>(std::ceil(correction_dim(beta_slow))), dims - 1);
  auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };

  // yarn_linear_ramp_mask(low, high, dims // 2); ints stay ints unless the singularity guard fires.
  double min_val = static_cast<double>(low), max_val = static_cast<double>(high);
  if (low == high) max_val += 0.001;
  auto ramp = mx::clip(mx::divide(mx::subtract(mx::arange(dims / 2, mx::float32), f32(min_val)),
                                  f32(max_val - min_val)),
                       f32(0), f32(1));
  auto freq_mask = mx::subtract(f32(1.0), ramp);
  auto freq_extra = base_freqs(base, dims);
  auto freq_inter = mx::multiply(f32(scaling_factor), freq_extra);
  auto freqs = mx::divide(mx::multiply(freq_inter, freq_extra),
                          mx::add(mx::multiply(freq_inter, freq_mask),
                                  mx::multiply(freq_extra, mx::subtract(f32(1), freq_mask))));
  return {freqs, get_mscale(scaling_factor, mscale) / get_mscale(scaling_factor, mscale_all_dim)};
}

std::string rope_type_of(const json& cfg) {
  if (cfg.is_null()) return "default";
  auto str = [&](const char* k) -> std::string {
    return cfg.contains(k) && cfg[k].is_string() ? cfg[k].get<std::string>() : std::string();
  };
  std::string t = str("type");
  if (t.empty()) t = str("rope_type");
  return t.empty() ? "default" : t;
}

// x.at[..., :dims].multiply(s): a product in x's dtype over the rotated features.
mx::array scale_features(const mx::array& x, int dims, double s) {
  auto factor = mx::astype(mx::array(static_cast<float>(s)), x.dtype());
  if (x.shape().back() == dims) return mx::multiply(x, factor);
  mx::Shape start(x.ndim(), 0), stop = x.shape();
  stop.back() = dims;
  return mx::slice_update(x, mx::multiply(mx::slice(x, start, stop), factor), start, stop);
}

}  // namespace

Rope Rope::initialize(int dims, double base, bool traditional, const json& scaling,
                      std::optional<int> max_positions, const std::string& source) {
  if (!scaling.is_null() && !scaling.is_object())
    throw ConfigError(source + ": rope_scaling must be an object or null");
  Rope r;
  r.dims_ = dims;
  r.traditional_ = traditional;
  r.type_ = rope_type_of(scaling);
  const std::string& t = r.type_;
  if (t == "default" || t == "linear") {
    r.base_ = static_cast<float>(base);
    r.scale_ = t == "linear" ? static_cast<float>(1.0 / number(scaling, "factor", source)) : 1.0f;
  } else if (t == "mrope") {
    // Text-only use of a multimodal RoPE: plain nn.RoPE (scale 1) once the three sections are checked.
    const json& sections = scaling.contains("mrope_section") ? scaling["mrope_section"] : json::array();
    const size_t n = sections.is_array() ? sections.size() : 0;
    if (n != 3)
      throw ConfigError(source + ": rope_scaling.mrope_section must list 3 sections (MRoPE currently only supports " +
                        "3 sections, got " + std::to_string(n) + ")");
    r.base_ = static_cast<float>(base);
  } else if (t == "dynamic") {
    if (!max_positions) throw ConfigError(source + ": dynamic rope needs max_position_embeddings");
    r.dynamic_base_ = base;
    r.dynamic_factor_ = number(scaling, "factor", source);
    r.dynamic_max_positions_ = *max_positions;
  } else if (t == "llama3") {
    r.freqs_ = llama3_freqs(dims, base, scaling, source);
  } else if (t == "yarn" || t == "deepseek_yarn" || t == "telechat3-yarn") {
    auto y = yarn(dims, base, scaling, source);
    r.freqs_ = y.freqs;
    if (y.mscale != 1.0) r.input_scale_ = y.mscale;
  } else if (t == "longrope") {
    if (!scaling.contains("long_factor") || !scaling.contains("original_max_position_embeddings"))
      throw ConfigError(source + ": longrope needs rope_scaling.long_factor and original_max_position_embeddings");
    double original = number(scaling, "original_max_position_embeddings", source);
    return su_scaled(dims, base, max_positions ? *max_positions : 131072, original, scaling["long_factor"],
                     number_or(scaling, "long_mscale", 0, source), source);
  } else if (t == "proportional") {
    // ProportionalRoPE (Gemma 4's global layers): the first int(dims * partial_rotary_factor)
    // features rotate with factor * base ** (i / dims), the rest get infinite wavelengths (no rotation).
    const int rotated = static_cast<int>(dims * number_or(scaling, "partial_rotary_factor", 1.0, source));
    if (rotated > dims)
      throw ConfigError(source + ": rope partial_rotary_factor rotates " + std::to_string(rotated) +
                        " features, more than the head's " + std::to_string(dims));
    const double factor = number_or(scaling, "factor", 1.0, source);
    auto exponents = mx::divide(mx::arange(0, rotated, 2, mx::float32), f32(dims));
    r.freqs_ = mx::concatenate({mx::multiply(f32(factor), mx::power(f32(base), exponents)),
                                mx::full({(dims - rotated) / 2}, f32(INFINITY))});
  } else {
    throw UnsupportedError(source + ": unsupported RoPE type '" + t +
                           "' (supported: default, linear, dynamic, llama3, yarn, longrope, mrope, proportional)");
  }
  return r;
}

Rope Rope::su_scaled(int dims, double base, double max_positions, double original_max_positions,
                     const json& long_factor, double long_mscale, const std::string& source) {
  Rope r;
  r.type_ = "longrope";
  r.dims_ = dims;
  std::vector<float> factors;
  if (long_factor.is_array()) {
    for (const auto& v : long_factor) {
      if (!v.is_number()) throw ConfigError(source + ": rope_scaling.long_factor must hold numbers");
      factors.push_back(v.get<float>());
    }
  } else if (long_factor.is_number()) {
    factors.push_back(long_factor.get<float>());
  } else {
    throw ConfigError(source + ": rope_scaling.long_factor must be a number or a list of numbers");
  }
  // mx.array(long_factor, dtype=mx.float32) * freqs: a list keeps its shape, a scalar broadcasts.
  auto lf = long_factor.is_array() ? mx::array(factors.data(), {static_cast<int>(factors.size())})
                                   : mx::array(factors[0]);
  r.freqs_ = mx::multiply(lf, base_freqs(base, dims));
  const double factor = max_positions / original_max_positions;
  const double default_scale = std::sqrt(1 + std::log(factor) / std::log(original_max_positions));
  r.input_scale_ = long_mscale ? long_mscale : (factor <= 1.0 ? 1.0 : default_scale);
  return r;
}

Rope Rope::with_freqs(int dims, bool traditional, mx::array freqs, const std::string& type) {
  Rope r;
  r.type_ = type;
  r.dims_ = dims;
  r.traditional_ = traditional;
  r.freqs_ = std::move(freqs);
  return r;
}

mx::array Rope::operator()(const mx::array& x, int offset) const {
  if (type_ == "dynamic") {
    double seq_len = std::max<double>(x.shape(-2) + offset, dynamic_max_positions_);
    double base = dynamic_base_ * std::pow((dynamic_factor_ * seq_len / dynamic_max_positions_) -
                                               (dynamic_factor_ - 1),
                                           static_cast<double>(dims_) / (dims_ - 2));
    return kernels::cpu::rope(cpu_, x, dims_, traditional_, static_cast<float>(base), 1.0f, offset, std::nullopt);
  }
  if (freqs_) {
    mx::array in = input_scale_ ? scale_features(x, dims_, *input_scale_) : x;
    return kernels::cpu::rope(cpu_, in, dims_, traditional_, std::nullopt, scale_, offset, *freqs_);
  }
  return kernels::cpu::rope(cpu_, x, dims_, traditional_, base_, scale_, offset, std::nullopt);
}

mx::array Rope::operator()(const mx::array& x, const mx::array& offset) const {
  if (!takes_offset_array()) throw std::logic_error("a dynamic NTK RoPE takes one offset, not one per row");
  if (freqs_) {
    mx::array in = input_scale_ ? scale_features(x, dims_, *input_scale_) : x;
    return mx::fast::rope(in, dims_, traditional_, std::nullopt, scale_, offset, *freqs_);
  }
  return mx::fast::rope(x, dims_, traditional_, base_, scale_, offset);
}

}  // namespace mlxrt::model::nn
