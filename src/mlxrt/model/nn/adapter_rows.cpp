#include "mlxrt/model/nn/adapter_rows.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <mlx/ops.h>

namespace mlxrt::model::nn {

void AdapterRows::set(const std::vector<int>& slot_of_row) {
  slots_.clear();
  masks_.clear();
  for (int s : slot_of_row)
    if (std::find(slots_.begin(), slots_.end(), s) == slots_.end()) slots_.push_back(s);
  uniform_ = slots_.size() <= 1;
  if (uniform_) return;
  const int rows = static_cast<int>(slot_of_row.size());
  for (int s : slots_) {
    std::vector<int32_t> uses(slot_of_row.size());
    for (size_t r = 0; r < slot_of_row.size(); ++r) uses[r] = slot_of_row[r] == s;
    masks_.push_back(mx::astype(mx::array(uses.data(), {rows}, mx::int32), mx::bool_));
  }
}

void AdapterRows::set_uniform(int slot) {
  slots_ = {slot};
  masks_.clear();
  uniform_ = true;
}

mx::array AdapterRows::select(const mx::array& base,
                              const std::function<std::optional<mx::array>(int slot)>& adapted) const {
  if (uniform_) {
    // One slot: exactly the single-adapter model's layer, with no selection op at all.
    if (slots_.empty()) return base;
    auto y = adapted(slots_.front());
    return y ? *y : base;
  }
  // where() copies each element from one of its inputs, so every row keeps its own slot's bytes.
  if (base.ndim() == 0 || base.shape(0) != masks_.front().shape(0))
    throw std::logic_error("mixed-adapter batch: a layer's output does not have the batch's " +
                           std::to_string(masks_.front().shape(0)) + " rows as its leading axis");
  mx::Shape mask_shape(static_cast<size_t>(base.ndim()), 1);
  mask_shape[0] = base.shape(0);
  auto out = base;
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto y = adapted(slots_[i]);
    if (y) out = mx::where(mx::reshape(masks_[i], mask_shape), *y, out);
  }
  return out;
}

}  // namespace mlxrt::model::nn
