#include "mlxrt/kernels/cpu/logsumexp.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <mlx/ops.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/cpu_workers.h"
#include "mlxrt/kernels/cpu/logsumexp_args.h"
#include "mlxrt/kernels/cpu/l3_rows.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cpu/operand.h"

namespace mlxrt::kernels::cpu {

namespace {

// What a LogSumExpRows node writes for each row.
enum class RowsOut {
  normalizer,     // MLX's LogSumExp node: [..., 1] of the input's type
  log_probs,      // mlx-lm's `x - logsumexp(x, -1, keepdims)`: x's shape and type
};

// MLX's LogSumExp node with our rows in place of its loop: the same input (x cast to at least a
// float type, as mx::logsumexp casts it) and the same output [..., 1] of that type. Or, as one
// node, the log-probabilities: each row's normalizer rounded to the row's type as that output is,
// then the row minus it as MLX's subtract computes it (one pass of workers over the rows instead
// of MLX's one-lane subtraction over the whole batch after them).
class LogSumExpRows : public mx::UnaryPrimitive {
 public:
  LogSumExpRows(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, RowsOut what)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)), what_(what) {}
  const char* name() const override { return what_ == RowsOut::normalizer ? "LogSumExpRows" : "LogProbsRows"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const LogSumExpRows*>(&other);
    return o && o->kernels_ == kernels_ && o->what_ == what_;
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string("[") + name() + "] runs on the CPU only");
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    auto fill = [k = kernels_, what = what_](mx::array& out, const std::vector<mx::array>& in) {
      const auto t = in[0].dtype();
      const detail::Operand x(in[0], static_cast<int>(in[0].ndim()));  // rows made contiguous, as MLX's copy
      const long long n = in[0].shape(-1);
      const long long rows = static_cast<long long>(in[0].size()) / n;
      const QmmElem elem = detail::elem_of(t);
      const long long width = static_cast<long long>(mx::size_of(t));
      char* dst = static_cast<char*>(out.data<void>());
      auto run_rows = [&](float* scratch, int begin, int end) {
        for (long long r = begin; r < end; ++r) {
#if defined(MLXRT_CPU_X86_KERNELS)
          const char* row = x.data + r * n * width;
          const float normalizer = logsumexp_row_avx2(row, elem, n, scratch);
          if (what == RowsOut::normalizer) {
            detail::store_float(dst, t, r, normalizer);
          } else {
            char rounded[4];  // the normalizer in the row's type, as the other output stores it
            detail::store_float(rounded, t, 0, normalizer);
            subtract_row_avx2(row, elem, n, detail::load_float(rounded, t, 0), dst + r * n * width);
          }
#else
          (void)scratch, (void)elem, (void)width, (void)dst, (void)r, (void)what;
#endif
        }
      };
      if (rows == 1) {
        std::vector<float> scratch(kLogSumExpScratch);
        run_rows(scratch.data(), 0, 1);
      } else {
        k->workers().run(static_cast<int>(rows), kLogSumExpScratch, run_rows);
      }
    };
    detail::schedule_on_cpu(stream(), inputs, out, fill);
  }

 private:
  std::shared_ptr<const CpuKernels> kernels_;
  RowsOut what_;
};

bool computes_exactly(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& y) {
#if defined(MLXRT_CPU_X86_KERNELS)
  if (!kernels || !kernels->fma() || y.primitive().stream().device != mx::Device::cpu || !y.has_primitive() ||
      std::string(y.primitive().name()) != "LogSumExp" || y.inputs().size() != 1)
    return false;
  const auto& x = y.inputs()[0];
  const auto t = x.dtype();
  return (t == mx::float32 || t == mx::bfloat16 || t == mx::float16) && x.ndim() >= 1 && x.size() > 0 &&
         x.size() / static_cast<size_t>(x.shape(-1)) < (size_t{1} << 31);
#else
  (void)kernels, (void)y;
  return false;
#endif
}

}  // namespace

mx::array logsumexp_last_axis(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x) {
  // MLX's node first: its checks, its cast of x and its output shape are what ours takes over.
  auto y = mx::logsumexp(x, -1, true);
  if (!computes_exactly(kernels, y)) return y;
  auto node = std::make_shared<LogSumExpRows>(y.primitive().stream(), kernels, RowsOut::normalizer);
  return mx::array(y.shape(), y.dtype(), std::move(node), y.inputs());
}

mx::array log_probs_last_axis(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x) {
  auto y = mx::logsumexp(x, -1, true);
  // Ours where our logsumexp is exact and reads x itself (no cast), in the types whose subtract
  // we round as MLX does.
  const bool subtract_type = x.dtype() == mx::float32 || x.dtype() == mx::bfloat16;
  if (!computes_exactly(kernels, y) || y.inputs()[0].id() != x.id() || !subtract_type)
    return mx::subtract(x, logsumexp_last_axis(kernels, x));
  auto node = std::make_shared<LogSumExpRows>(y.primitive().stream(), kernels, RowsOut::log_probs);
  return mx::array(x.shape(), x.dtype(), std::move(node), {x});
}

}  // namespace mlxrt::kernels::cpu
