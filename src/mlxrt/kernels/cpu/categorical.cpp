#include "mlxrt/kernels/cpu/categorical.h"

#include <cstdint>
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
      std::vector<float> cdf(static_cast<size_t>(n));
#if defined(MLXRT_CPU_X86_KERNELS)
      out.data<std::uint32_t>()[0] = inverse_cdf_row_avx2(x.data, detail::elem_of(t), n, u, cdf.data());
#else
      (void)t, (void)u, (void)out;
#endif
    });
  }
};

}  // namespace

mx::array categorical_last_axis(const mx::array& logits, const mx::array& key) {
  const auto t = logits.dtype();
  const bool one_row = logits.ndim() >= 2 && logits.shape(-1) > 0 && logits.size() == static_cast<size_t>(logits.shape(-1));
  const bool ours = one_row && (t == mx::float32 || t == mx::bfloat16 || t == mx::float16) &&
                    own_kernels_here(/*fma=*/true) && mx::default_device() == mx::Device::cpu &&
                    logits.shape(-1) <= static_cast<int>(UINT32_MAX >> 1);
  if (!ours) return mx::random::categorical(logits, -1, key);
  // MLX's draw for one row: its uniform number of the draw's shape (the logits' without the last
  // axis), from the key, then the search; ours takes the same number.
  auto shape = logits.shape();
  shape.pop_back();
  auto u = mx::random::uniform(shape, mx::float32, key);
  return mx::array(shape, mx::uint32, std::make_shared<InverseCdfDraw>(mx::default_stream(mx::Device::cpu)),
                   {logits, u});
}

}  // namespace mlxrt::kernels::cpu
