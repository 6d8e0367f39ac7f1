#include "mlxrt/kernels/cpu/categorical.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include <mlx/ops.h>
#include <mlx/primitives.h>
#include <mlx/random.h>

#include "mlxrt/kernels/cpu/categorical_args.h"
#include "mlxrt/kernels/cpu/l3_rows.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cpu/operand.h"

namespace mlxrt::kernels::cpu {

namespace {

// MLX's inverse-CDF draw of one row (the maximum, the weights, their running sum, the sum, the
// search and the final minus one) as one node: inputs the logits and the draw's uniform number,
// which MLX's own uniform() makes from the key (so the key is used exactly as MLX uses it).
class InverseCdfDraw : public mx::UnaryPrimitive {
 public:
  explicit InverseCdfDraw(mx::Stream stream) : mx::UnaryPrimitive(stream) {}
  const char* name() const override { return "InverseCdfDraw"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return dynamic_cast<const InverseCdfDraw*>(&other);
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[InverseCdfDraw] runs on the CPU only");
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [](mx::array& out, const std::vector<mx::array>& in) {
      const auto t = in[0].dtype();
      const detail::Operand x(in[0], static_cast<int>(in[0].ndim()));  // the row made contiguous
      const long long n = in[0].shape(-1);
      const float u = in[1].data<float>()[0];
      // Not value-initialized (a step's draw would clear 600 KB first): the row fills it.
      std::unique_ptr<float[]> cdf(new float[static_cast<size_t>(n)]);
#if defined(MLXRT_CPU_X86_KERNELS)
      out.data<std::uint32_t>()[0] = inverse_cdf_row_avx2(x.data, detail::elem_of(t), n, u, cdf.get());
#else
      (void)t, (void)u, (void)out;
#endif
    });
  }
};

// MLX's float32 Gumbel sum for one element exactly as its graph computes it: uniform() of the word
// (its division, its clamp below one, its times one plus zero), -log(-log(u)) by the C library's
// logf, plus the logit.
[[maybe_unused]] float gumbel_sum_exactly(std::uint32_t word, float logit) {
  float u = static_cast<float>(word) / 4294967296.0f;
  u = u < 0.99999994f ? u : 0.99999994f;
  u = 1.0f * u + 0.0f;
  const float g = -std::log(-std::log(u));
  return g + logit;
}

// MLX's argmax over exact sums of the elements `at` (ascending): the first NaN, else the first of
// the largest. (Unused where the AVX2 files are not built.)
[[maybe_unused]] std::uint32_t argmax_of_exact_sums(const detail::Operand& x, mx::Dtype t, long long row_start,
                                                    const std::uint32_t* words, const std::uint32_t* at,
                                                    long long count) {
  std::uint32_t best = 0;
  float best_sum = 0;
  bool first = true;
  for (long long j = 0; j < count; ++j) {
    const long long i = at[j];
    const float s = gumbel_sum_exactly(words[i], detail::load_float(x.data, t, row_start + i));
    if (s != s) return static_cast<std::uint32_t>(i);
    if (first || s > best_sum) {
      best = static_cast<std::uint32_t>(i);
      best_sum = s;
      first = false;
    }
  }
  return best;
}

// MLX's Gumbel draw over the rows of the logits (gumbel() of the logits' shape from the key, added
// to them, argmax over the last axis) as one node: the key's words by our Threefry, each row's sums
// approximately, then exactly (the C library's logf, as MLX's graph calls it) for the few elements
// whose sums come within the approximation's slack of the largest.
class GumbelDraw : public mx::UnaryPrimitive {
 public:
  explicit GumbelDraw(mx::Stream stream) : mx::UnaryPrimitive(stream) {}
  const char* name() const override { return "GumbelDraw"; }
  bool is_equivalent(const mx::Primitive& other) const override { return dynamic_cast<const GumbelDraw*>(&other); }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[GumbelDraw] runs on the CPU only");
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [](mx::array& out, const std::vector<mx::array>& in) {
#if defined(MLXRT_CPU_X86_KERNELS)
      const auto t = in[0].dtype();
      const detail::Operand x(in[0], static_cast<int>(in[0].ndim()));  // rows made contiguous
      const long long n = in[0].shape(-1);
      const long long rows = static_cast<long long>(in[0].size()) / n;
      const auto& key = in[1];
      const std::uint32_t* k = key.data<std::uint32_t>();
      // Not value-initialized: every word and sum is written before it is read.
      std::unique_ptr<std::uint32_t[]> words(new std::uint32_t[static_cast<size_t>(rows * n)]);
      random_bits_avx2(k[0], k[key.strides()[0]], rows * n, words.get());
      std::unique_ptr<float[]> sums(new float[static_cast<size_t>(n)]);
      std::unique_ptr<std::uint32_t[]> near(new std::uint32_t[static_cast<size_t>(n)]);
      const long long width = static_cast<long long>(mx::size_of(t));
      auto* dst = out.data<std::uint32_t>();
      for (long long r = 0; r < rows; ++r) {
        const std::uint32_t* w = words.get() + r * n;
        bool unusual = false;
        const float lower = gumbel_sums_row_avx2(x.data + r * n * width, detail::elem_of(t), n, w, sums.get(), unusual);
        long long count = n;
        if (unusual || !(lower > -INFINITY)) {
          for (long long i = 0; i < n; ++i) near[i] = static_cast<std::uint32_t>(i);  // every sum exactly
        } else {
          count = gumbel_near_row_avx2(sums.get(), n, lower, near.get());
        }
        dst[r] = argmax_of_exact_sums(x, t, r * n, w, near.get(), count);
      }
#else
      (void)out, (void)in;
#endif
    });
  }
};

}  // namespace

mx::array categorical_last_axis(const mx::array& logits, const mx::array& key) {
  const auto t = logits.dtype();
  const bool ours = logits.ndim() >= 1 && logits.shape(-1) > 0 &&
                    (t == mx::float32 || t == mx::bfloat16 || t == mx::float16) && key.dtype() == mx::uint32 &&
                    key.shape() == mx::Shape{2} && own_kernels_here(/*fma=*/true) &&
                    mx::default_device() == mx::Device::cpu && logits.size() < (size_t{1} << 31);
  if (!ours) return mx::random::categorical(logits, -1, key);
  const bool one_row = logits.ndim() >= 2 && logits.size() == static_cast<size_t>(logits.shape(-1));
  if (!one_row) {
    // MLX's Gumbel draw: every row, or a row without a row axis.
    auto shape = logits.shape();
    shape.pop_back();
    return mx::array(shape, mx::uint32, std::make_shared<GumbelDraw>(mx::default_stream(mx::Device::cpu)), {logits, key});
  }
  // MLX's draw for one row: its uniform number of the draw's shape (the logits' without the last
  // axis), from the key, then the search; ours takes the same number.
  auto shape = logits.shape();
  shape.pop_back();
  auto u = mx::random::uniform(shape, mx::float32, key);
  return mx::array(shape, mx::uint32, std::make_shared<InverseCdfDraw>(mx::default_stream(mx::Device::cpu)),
                   {logits, u});
}

}  // namespace mlxrt::kernels::cpu
