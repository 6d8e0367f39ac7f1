#pragma once
// The q/k norms + RoPE kernel's test cases and their operands, shared by its GPU test (against
// MLX's GPU nodes, tests/gpu/qk_rope_cuda_test.cpp) and its CPU test (against float64 on the SIMT
// runtime, tests/cuda_emu/qk_rope_emu_test.cpp). q and k are drawn from {±0.5, ±1, ±2}, whose
// squares sum exactly in float32 in any order, so the kernel's norm is determined exactly.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/kernels/cuda/qk_rope.h"

namespace mlxrt::kernels::cuda::kernel_tests {

struct QkRopeCase {
  mx::Dtype dtype;
  int heads, kv_heads, head_dim, rot;
  int batch, length;
  bool norm, traditional, freqs;
  std::vector<int> offsets;  // one, or one per batch row
};

// [B, L, n] with values in {±0.5, ±1, ±2}.
inline mx::array exact_square(mx::array key, int b, int l, int n, mx::Dtype t) {
  auto keys = mx::random::split(key);
  auto exponent = mx::astype(mx::random::randint(-1, 2, {b, l, n}, mx::int32, keys.first), mx::float32);
  auto mag = mx::power(mx::array(2.0f), exponent);
  auto heads = mx::random::bernoulli(mx::array(0.5f), {b, l, n}, keys.second);
  auto sign = mx::where(heads, mx::array(1.0f), mx::array(-1.0f));
  auto x = mx::astype(mx::multiply(mag, sign), t);
  mx::eval(x);
  return x;
}

struct QkRopeOperands {
  mx::array q, k;  // [B, L, heads * head_dim]
  std::optional<RmsNormIn> q_norm, k_norm;
  RopeIn rope;
  mx::array offset;  // a scalar, or one per batch row
  bool per_row;
};

// The case's operands, drawn from a seed of its own.
inline QkRopeOperands qk_rope_operands(const QkRopeCase& c) {
  auto key = mx::random::key(c.heads * 131 + c.head_dim * 7 + c.batch * 3 + c.length);
  auto next = [&key] {
    auto parts = mx::random::split(key);
    key = parts.first;
    return parts.second;
  };
  const auto q = exact_square(next(), c.batch, c.length, c.heads * c.head_dim, c.dtype);
  const auto k = exact_square(next(), c.batch, c.length, c.kv_heads * c.head_dim, c.dtype);
  std::optional<RmsNormIn> q_norm, k_norm;
  if (c.norm) {
    // Weights of the type, near 1 as a trained norm's (any value: the product is rounded once).
    auto weight = [&] {
      return mx::astype(mx::add(mx::array(1.0f), mx::multiply(mx::random::normal({c.head_dim}, mx::float32, next()),
                                                               mx::array(0.1f))),
                        c.dtype);
    };
    auto qw = weight();
    auto kw = weight();
    mx::eval({qw, kw});
    q_norm = RmsNormIn{qw, 1e-6f};
    k_norm = RmsNormIn{kw, 1e-5f};
  }
  RopeIn rope{c.rot, c.traditional, std::nullopt, 1.0f, std::nullopt};
  if (c.freqs) {
    // llama3-style frequencies: base^(2i / dims), some stretched.
    auto i = mx::astype(mx::arange(0, c.rot, 2), mx::float32);
    auto f = mx::power(mx::array(500000.0f), mx::divide(i, mx::array(static_cast<float>(c.rot))));
    f = mx::where(mx::greater(i, mx::array(c.rot / 2.0f)), mx::multiply(f, mx::array(8.0f)), f);
    mx::eval(f);
    rope.freqs = f;
  } else {
    rope.base = 1000000.0f;
  }
  const bool per_row = c.offsets.size() > 1;
  const auto offset = per_row ? mx::array(c.offsets.data(), {static_cast<int>(c.offsets.size())}, mx::int32)
                              : mx::array(c.offsets[0], mx::int32);
  return {q, k, q_norm, k_norm, rope, offset, per_row};
}

inline std::string qk_rope_label(const QkRopeCase& c, const char* part) {
  char text[200];
  std::snprintf(text, sizeof text, "%s %s heads %d/%d of %d rot %d rows %dx%d%s%s%s offsets %zu", part,
                c.dtype == mx::bfloat16 ? "bfloat16" : c.dtype == mx::float16 ? "float16" : "float32", c.heads,
                c.kv_heads, c.head_dim, c.rot, c.batch, c.length, c.norm ? " norm" : "",
                c.traditional ? " traditional" : "", c.freqs ? " freqs" : "", c.offsets.size());
  return text;
}

}  // namespace mlxrt::kernels::cuda::kernel_tests
