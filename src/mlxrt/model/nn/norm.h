#pragma once
/** mlx.nn.RMSNorm: fast::rms_norm with the checkpoint's weight. */
#include <string>

#include <mlx/array.h>
#include <mlx/fast.h>

#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::nn {

class RMSNorm {
 public:
  static RMSNorm load(WeightBinder& w, const std::string& path, int dims, float eps) {
    return RMSNorm(w.take(path + ".weight", {dims}), eps);
  }
  mx::array operator()(const mx::array& x) const { return mx::fast::rms_norm(x, weight_, eps_); }

 private:
  RMSNorm(mx::array weight, float eps) : weight_(std::move(weight)), eps_(eps) {}
  mx::array weight_;
  float eps_;
};

}  // namespace mlxrt::model::nn
