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

// MLX's LogSumExp node with our rows in place of its loop: the same input (x cast to at least a
// float type, as mx::logsumexp casts it) and the same output [..., 1] of that type.
class LogSumExpRows : public mx::UnaryPrimitive {
 public:
  LogSumExpRows(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)) {}
  const char* name() const override { return "LogSumExpRows"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const LogSumExpRows*>(&other);
    return o && o->kernels_ == kernels_;
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[LogSumExpRows] runs on the CPU only");
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [k = kernels_](mx::array& out, const std::vector<mx::array>& in) {
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
          detail::store_float(dst, t, r, logsumexp_row_avx2(x.data + r * n * width, elem, n, scratch));
#else
          (void)scratch, (void)elem, (void)width, (void)dst, (void)r;
#endif
        }
      };
      if (rows == 1) {
        std::vector<float> scratch(kLogSumExpScratch);
        run_rows(scratch.data(), 0, 1);
      } else {
        k->workers().run(static_cast<int>(rows), kLogSumExpScratch, run_rows);
      }
    });
  }

 private:
  std::shared_ptr<const CpuKernels> kernels_;
};

// mlx-lm's `logits - logsumexp(logits, -1, keepdims)` as one node: each row's normalizer as
// LogSumExpRows computes it, rounded to the row's type as that node's output is, then the row minus
// it as MLX's subtract computes it. One pass of workers over the rows instead of MLX's one-lane
// subtract over the whole batch after them.
class LogProbsRows : public mx::UnaryPrimitive {
 public:
  LogProbsRows(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)) {}
  const char* name() const override { return "LogProbsRows"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const LogProbsRows*>(&other);
    return o && o->kernels_ == kernels_;
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[LogProbsRows] runs on the CPU only");
  }

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    detail::schedule_on_cpu(stream(), inputs, out, [k = kernels_](mx::array& out, const std::vector<mx::array>& in) {
      const auto t = in[0].dtype();
      const detail::Operand x(in[0], static_cast<int>(in[0].ndim()));
      const long long n = in[0].shape(-1);
      const long long rows = static_cast<long long>(in[0].size()) / n;
      const QmmElem elem = detail::elem_of(t);
      const long long width = static_cast<long long>(mx::size_of(t));
      char* dst = static_cast<char*>(out.data<void>());
      auto run_rows = [&](float* scratch, int begin, int end) {
        for (long long r = begin; r < end; ++r) {
#if defined(MLXRT_CPU_X86_KERNELS)
          const char* row = x.data + r * n * width;
          // The normalizer in the row's type, as LogSumExpRows stores it.
          char rounded[4];
          detail::store_float(rounded, t, 0, logsumexp_row_avx2(row, elem, n, scratch));
          subtract_row_avx2(row, elem, n, detail::load_float(rounded, t, 0), dst + r * n * width);
#else
          (void)scratch, (void)elem, (void)width, (void)dst, (void)r;
#endif
        }
      };
      if (rows == 1) {
        std::vector<float> scratch(kLogSumExpScratch);
        run_rows(scratch.data(), 0, 1);
      } else {
        k->workers().run(static_cast<int>(rows), kLogSumExpScratch, run_rows);
      }
    });
  }

 private:
  std::shared_ptr<const CpuKernels> kernels_;
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
  return mx::array(y.shape(), y.dtype(), std::make_shared<LogSumExpRows>(y.primitive().stream(), kernels), y.inputs());
}

mx::array log_probs_last_axis(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x) {
  auto y = mx::logsumexp(x, -1, true);
  // Ours where our logsumexp is exact and reads x itself (no cast), in the types whose subtract
  // we round as MLX does.
  if (!computes_exactly(kernels, y) || y.inputs()[0].id() != x.id() || (x.dtype() != mx::float32 && x.dtype() != mx::bfloat16))
    return mx::subtract(x, logsumexp_last_axis(kernels, x));
  return mx::array(x.shape(), x.dtype(), std::make_shared<LogProbsRows>(y.primitive().stream(), kernels), {x});
}

}  // namespace mlxrt::kernels::cpu
