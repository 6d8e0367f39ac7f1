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

mx::array AdapterRows::choose(const mx::array& base, const Adapted& adapted,
                              const std::function<mx::array(size_t)>& mask) const {
  if (uniform_) {
    // One slot: exactly the single-adapter model's layer, with no selection op at all.
    if (slots_.empty()) return base;
    auto y = adapted(slots_.front());
    return y ? *y : base;
  }
  // where() copies each element from one of its inputs, so every row keeps its own slot's bytes.
  auto out = base;
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto y = adapted(slots_[i]);
    if (y) out = mx::where(mask(i), *y, out);
  }
  return out;
}

mx::array AdapterRows::select(const mx::array& base, const Adapted& adapted) const {
  const int rows = masks_.empty() ? 0 : masks_.front().shape(0);
  const int lead = base.ndim() == 0 ? 0 : base.shape(0);
  if (!uniform_ && (lead == 0 || lead % rows != 0))
    throw std::logic_error("mixed-adapter batch: a layer's output does not have the batch's " + std::to_string(rows) +
                           " rows (or their tokens) as its leading axis");
  mx::Shape shape(static_cast<size_t>(base.ndim()), 1);
  if (!shape.empty()) shape[0] = lead;
  return choose(base, adapted, [&](size_t i) {
    // Flattened tokens: each row's mask repeated over its lead / rows tokens.
    auto m = lead == rows ? masks_[i] : mx::repeat(masks_[i], lead / rows, 0);
    return mx::reshape(m, shape);
  });
}

mx::array AdapterRows::select_pairs(const mx::array& base, const mx::array& token_of, int num_tokens,
                                    const Adapted& adapted) const {
  const int rows = masks_.empty() ? 0 : masks_.front().shape(0);
  if (!uniform_ && (rows == 0 || num_tokens % rows != 0))
    throw std::logic_error("mixed-adapter batch: " + std::to_string(num_tokens) + " tokens are not whole rows of " +
                           std::to_string(rows));
  mx::Shape shape(static_cast<size_t>(base.ndim()), 1);
  if (!shape.empty()) shape[0] = base.shape(0);
  return choose(base, adapted, [&](size_t i) {
    auto row = mx::floor_divide(token_of, mx::array(num_tokens / rows, token_of.dtype()));
    return mx::reshape(mx::take(masks_[i], row, 0), shape);
  });
}

}  // namespace mlxrt::model::nn
