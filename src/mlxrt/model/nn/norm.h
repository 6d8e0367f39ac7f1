#pragma once
/** mlx.nn.RMSNorm: fast::rms_norm with the checkpoint's weight; and Gemma's (1 + weight) variant. */
#include <string>

#include <mlx/array.h>
#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/kernels/cpu/l3_fused.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::nn {

class RMSNorm {
 public:
  static RMSNorm load(WeightBinder& w, const std::string& path, int dims, float eps) {
    return RMSNorm(w.take(path + ".weight", {dims}), eps, w.cpu_kernels());
  }
  mx::array operator()(const mx::array& x) const { return kernels::cpu::rms_norm(cpu_, x, weight_, eps_); }

 private:
  RMSNorm(mx::array weight, float eps, std::shared_ptr<const kernels::cpu::CpuKernels> cpu)
      : weight_(std::move(weight)), eps_(eps), cpu_(std::move(cpu)) {}
  mx::array weight_;
  float eps_;
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_;  // the fused L3 RMSNorm where it runs
};

/** Gemma's RMSNorm (gemma.py, gemma2.py, gemma3_text.py): it scales by 1 + weight, the checkpoint
 * storing the offset from one. The sum is taken once, in the weight's dtype, the same op mlx-lm
 * runs on every call. */
class GemmaRMSNorm {
 public:
  static GemmaRMSNorm load(WeightBinder& w, const std::string& path, int dims, float eps) {
    auto weight = w.take(path + ".weight", {dims});
    return GemmaRMSNorm(mx::add(mx::array(1.0f, weight.dtype()), weight), eps);
  }
  mx::array operator()(const mx::array& x) const { return mx::fast::rms_norm(x, scale_, eps_); }

 private:
  GemmaRMSNorm(mx::array scale, float eps) : scale_(std::move(scale)), eps_(eps) {}
  mx::array scale_;
  float eps_;
};

}  // namespace mlxrt::model::nn
