#include "mlxrt/model/nn/weight_binder.h"

#include <algorithm>
#include <sstream>

#include <mlx/ops.h>
#include <mlx/utils.h>

#include "mlxrt/model/nn/lora.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model {

namespace {

std::string shape_str(const mx::Shape& s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << (s.size() == 1 ? ",)" : ")");
  return o.str();
}

std::string join_limited(std::vector<std::string> names, size_t limit = 20) {
  std::sort(names.begin(), names.end());
  std::ostringstream o;
  for (size_t i = 0; i < names.size() && i < limit; ++i) o << (i ? ", " : "") << names[i];
  if (names.size() > limit) o << ", ... (" << names.size() - limit << " more)";
  return o.str();
}

}  // namespace

mx::array WeightBinder::take(const std::string& name, const mx::Shape& shape) {
  auto it = weights_.find(name);
  if (it == weights_.end()) {
    missing_.push_back(name);
    return mx::zeros(shape);
  }
  mx::array a = it->second;
  weights_.erase(it);
  taken_.push_back(a);
  taken_names_.push_back(name);
  if (a.shape() != shape) {
    misshaped_.push_back(name + ": expected shape " + shape_str(shape) + " but the checkpoint has " +
                         shape_str(a.shape()));
  }
  if (float32_ && mx::issubdtype(a.dtype(), mx::floating) && a.dtype() != mx::float32) return mx::astype(a, mx::float32);
  return a;
}

std::optional<mx::array> WeightBinder::take_if_present(const std::string& name, const mx::Shape& shape) {
  if (!has(name)) return std::nullopt;
  return take(name, shape);
}

void WeightBinder::replace(const std::string& name, mx::array value) { weights_.insert_or_assign(name, std::move(value)); }

std::vector<std::string> WeightBinder::names() const {
  std::vector<std::string> out;
  out.reserve(weights_.size());
  for (const auto& [name, _] : weights_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

bool WeightBinder::stack_experts(const std::string& experts, const std::string& into, int num_experts,
                                 const std::vector<std::pair<std::string, std::string>>& names,
                                 const std::vector<std::string>& suffixes) {
  const std::string dir = config_.dir().string();
  bool stacked = false;
  for (const auto& [from, to] : names) {
    for (const auto& suffix : suffixes) {
      auto name_of = [&](int e) { return experts + "." + std::to_string(e) + "." + from + "." + suffix; };
      auto first = weights_.find(name_of(0));
      if (first == weights_.end()) continue;
      std::vector<mx::array> parts;
      for (int e = 0; e < num_experts; ++e) {
        auto it = weights_.find(name_of(e));
        if (it == weights_.end())
          throw WeightsError(dir + ": " + name_of(e) + " is missing: the checkpoint stores its experts one by one, " +
                             "and " + name_of(0) + " exists, so each of the " + std::to_string(num_experts) +
                             " experts needs it");
        const mx::array& a = it->second;
        if (a.shape() != first->second.shape() || a.dtype() != first->second.dtype()) {
          std::ostringstream d0, de;
          d0 << first->second.dtype();
          de << a.dtype();
          throw WeightsError(dir + ": " + name_of(e) + " has shape " + shape_str(a.shape()) + " and dtype " +
                             de.str() + ", but " + name_of(0) + " has shape " + shape_str(first->second.shape()) +
                             " and dtype " + d0.str() + ": the experts of one projection must be stored alike " +
                             "(the same quantization)");
        }
        parts.push_back(a);
      }
      for (int e = 0; e < num_experts; ++e) weights_.erase(name_of(e));
      weights_.insert_or_assign(into + "." + to + "." + suffix, mx::stack(parts));
      stacked = true;
    }
  }
  return stacked;
}

std::optional<mx::array> WeightBinder::pop(const std::string& name) {
  auto it = weights_.find(name);
  if (it == weights_.end()) return std::nullopt;
  mx::array a = it->second;
  weights_.erase(it);
  return a;
}

std::optional<io::SavedQuantTensors> WeightBinder::saved_quant(const std::string& path) const {
  auto scales = weights_.find(path + ".scales");
  auto weight = weights_.find(path + ".weight");
  if (scales == weights_.end() || weight == weights_.end()) return std::nullopt;
  if (scales->second.ndim() < 1 || weight->second.ndim() < 1) return std::nullopt;
  return io::SavedQuantTensors{weight->second.shape().back(), scales->second.shape().back(),
                               scales->second.dtype() == mx::uint8};
}

void WeightBinder::set_locations(io::TensorLocations locations) {
  locations_ = std::move(locations);
  for (const auto& [name, a] : weights_) original_ids_[name] = a.id();
}

mx::array WeightBinder::keep_shard(const std::string& name, const mx::array& taken, int axis) {
  const auto* group = tensor_group();
  const int rank = group->rank(), size = group->size();
  auto kept = nn::shard_tensor(taken, axis, rank, size, name);  // lazy: checks the split, reads nothing
  auto at = locations_.find(name);
  auto original = original_ids_.find(name);
  if (at != locations_.end() && original != original_ids_.end() && original->second == taken.id()) {
    const int ax = axis < 0 ? axis + static_cast<int>(taken.ndim()) : axis;
    const int part = taken.shape(ax) / size;
    kept = io::read_tensor_slice(at->second, taken.shape(), taken.dtype(), ax, rank * part, (rank + 1) * part);
  }
  retake(taken, kept);
  return kept;
}

void WeightBinder::finish() {
  std::ostringstream msg;
  std::string dir = config_.dir().string();
  if (!missing_.empty()) msg << "\n  missing parameters: " << join_limited(missing_);
  if (!misshaped_.empty()) msg << "\n  mis-shaped parameters: " << join_limited(misshaped_, 10);
  std::vector<std::string> extra;
  for (const auto& [name, _] : weights_) extra.push_back(name);
  if (!extra.empty()) msg << "\n  unexpected parameters: " << join_limited(extra);
  if (!msg.str().empty()) throw WeightsError(dir + ": weights do not match the model" + msg.str());
  if (adapter_) adapter_->finish();
  for (const auto& a : slots_.adapters)
    if (a) a->finish();
}

}  // namespace mlxrt::model
