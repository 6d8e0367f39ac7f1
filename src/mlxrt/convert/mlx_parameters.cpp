// The parameter edits of mlx_lm/convert.py and mlx_lm/utils.py (quantize_model, dequantize_model,
// get_total_parameters), mlx-lm 0.32.2, over a flattened parameter list.
#include "mlxrt/convert/mlx_parameters.h"

#include <algorithm>
#include <set>

#include <mlx/ops.h>

#include "mlxrt/model/nn/lora.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace {

std::string module_of(const std::string& name) {
  auto dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

}  // namespace

MlxParameters::MlxParameters(std::vector<Parameter> parameters, std::vector<model::QuantizableModule> modules)
    : parameters_(std::move(parameters)) {
  for (auto& m : modules) modules_.push_back(Module{m, m.spec});
}

void MlxParameters::cast_floating(mx::Dtype dtype, const std::function<bool(const std::string&)>& keep) {
  for (auto& p : parameters_)
    if (!keep(p.name) && mx::issubdtype(p.value.dtype(), mx::floating)) p.value = mx::astype(p.value, dtype);
}

std::pair<size_t, size_t> MlxParameters::block(const std::string& path) const {
  const std::string prefix = path + ".";
  size_t first = parameters_.size(), last = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& n = parameters_[i].name;
    if (n.compare(0, prefix.size(), prefix) != 0 || n.find('.', prefix.size()) != std::string::npos) continue;
    first = std::min(first, i);
    last = i + 1;
  }
  if (first >= last) throw Error("convert: module " + path + " holds no parameters");
  return {first, last};
}

std::vector<std::string> MlxParameters::module_paths() const {
  std::vector<std::pair<size_t, std::string>> ordered;
  for (const auto& m : modules_) ordered.emplace_back(block(m.info.path).first, m.info.path);
  std::sort(ordered.begin(), ordered.end());
  std::vector<std::string> out;
  for (auto& [_, path] : ordered) out.push_back(path);
  return out;
}

std::vector<std::pair<std::string, MlxParameters::Decision>> MlxParameters::quantize(const Predicate& predicate) {
  std::vector<std::pair<std::string, Decision>> done;
  for (const auto& path : module_paths()) {
    auto& m = *std::find_if(modules_.begin(), modules_.end(), [&](const Module& x) { return x.info.path == path; });
    if (m.spec) continue;  // a QuantizedLinear has no to_quantized
    auto [first, last] = block(path);
    std::optional<mx::array> weight, bias;
    for (size_t i = first; i < last; ++i) {
      const auto& n = parameters_[i].name;
      if (n == path + ".weight") weight = parameters_[i].value;
      else if (n == path + ".bias") bias = parameters_[i].value;
      else throw Error("convert: module " + path + " holds " + n + ", which a quantized layer does not keep");
    }
    if (!weight) throw Error("convert: module " + path + " has no weight");
    auto decision = predicate(path, m.info, *weight);
    if (!decision) continue;
    const auto& s = decision->spec;
    auto packed = mx::quantize(*weight, s.group_size, s.bits, s.mode);
    // QuantizedLinear.from_linear / QuantizedEmbedding.from_embedding / QuantizedSwitchLinear:
    // weight, scales, biases (affine only), then the float layer's bias.
    std::vector<Parameter> replaced{{path + ".weight", packed[0]}, {path + ".scales", packed[1]}};
    if (packed.size() > 2) replaced.push_back({path + ".biases", packed[2]});
    if (bias && m.info.kind != model::QuantizableModule::Kind::embedding) replaced.push_back({path + ".bias", *bias});
    parameters_.erase(parameters_.begin() + static_cast<long>(first), parameters_.begin() + static_cast<long>(last));
    parameters_.insert(parameters_.begin() + static_cast<long>(first), replaced.begin(), replaced.end());
    m.spec = s;
    done.emplace_back(path, std::move(*decision));
  }
  return done;
}

int MlxParameters::fuse(bool dequantize) {
  using Kind = model::QuantizableModule::Kind;
  int fused = 0;
  for (const auto& path : module_paths()) {
    auto& m = *std::find_if(modules_.begin(), modules_.end(), [&](const Module& x) { return x.info.path == path; });
    if (!m.info.lora) continue;
    const auto& delta = *m.info.lora;
    auto [first, last] = block(path);
    std::optional<mx::array> weight, scales, biases, bias;
    for (size_t i = first; i < last; ++i) {
      const auto n = parameters_[i].name.substr(path.size() + 1);
      const auto& v = parameters_[i].value;
      if (n == "weight") weight = v;
      else if (n == "scales") scales = v;
      else if (n == "biases") biases = v;
      else if (n == "bias") bias = v;
      else throw UnsupportedError("fuse: " + path + "." + n + " (a per-expert global scale) is not fused by mlx-lm");
    }
    if (!weight) throw Error("fuse: module " + path + " has no weight");
    const bool quantized = m.spec.has_value();
    mx::array w = *weight;
    // DoRAEmbedding.fuse takes the embedding's weight as it is (mlx-lm refuses DoRA on a
    // quantized embedding before this point).
    if (quantized && !(m.info.kind == Kind::embedding && delta.dora))
      w = mx::dequantize(w, *scales, biases, m.spec->group_size, m.spec->bits, m.spec->mode);
    switch (m.info.kind) {
      case Kind::linear: w = model::nn::fused_linear_weight(delta, w); break;
      case Kind::embedding: w = model::nn::fused_embedding_weight(delta, w); break;
      case Kind::switch_linear: w = model::nn::fused_switch_weight(delta, w); break;
    }
    std::vector<Parameter> replaced{{path + ".weight", w}};
    const bool requantize = quantized && !dequantize && !(m.info.kind == Kind::embedding && delta.dora);
    if (requantize) {
      // QuantizedLinear.from_linear / from_embedding / SwitchLinear.to_quantized with the layer's packing.
      auto packed = mx::quantize(w, m.spec->group_size, m.spec->bits, m.spec->mode);
      replaced = {{path + ".weight", packed[0]}, {path + ".scales", packed[1]}};
      if (packed.size() > 2) replaced.push_back({path + ".biases", packed[2]});
    } else {
      m.spec.reset();
    }
    if (bias) replaced.push_back({path + ".bias", *bias});
    parameters_.erase(parameters_.begin() + static_cast<long>(first), parameters_.begin() + static_cast<long>(last));
    parameters_.insert(parameters_.begin() + static_cast<long>(first), replaced.begin(), replaced.end());
    ++fused;
  }
  return fused;
}

void MlxParameters::dequantize() {
  for (const auto& path : module_paths()) {
    auto& m = *std::find_if(modules_.begin(), modules_.end(), [&](const Module& x) { return x.info.path == path; });
    if (!m.spec) continue;
    auto [first, last] = block(path);
    std::optional<mx::array> weight, scales, biases, bias;
    for (size_t i = first; i < last; ++i) {
      const auto& n = parameters_[i].name.substr(path.size() + 1);
      const auto& v = parameters_[i].value;
      if (n == "weight") weight = v;
      else if (n == "scales") scales = v;
      else if (n == "biases") biases = v;
      else if (n == "bias") bias = v;
      else
        throw UnsupportedError("convert --dequantize: " + path + "." + n +
                               " (a per-expert global scale) has no dequantized form in mlx-lm's dequantize_model");
    }
    if (!weight || !scales) throw Error("convert: quantized module " + path + " lacks its weight or scales");
    const auto& s = *m.spec;
    // nn.Linear(in, out, bias) then m.bias = ..., m.weight = ...: weight first, then bias.
    std::vector<Parameter> replaced{{path + ".weight", mx::dequantize(*weight, *scales, biases, s.group_size, s.bits, s.mode)}};
    if (bias) replaced.push_back({path + ".bias", *bias});
    parameters_.erase(parameters_.begin() + static_cast<long>(first), parameters_.begin() + static_cast<long>(last));
    parameters_.insert(parameters_.begin() + static_cast<long>(first), replaced.begin(), replaced.end());
    m.spec.reset();
  }
}

uint64_t MlxParameters::total_parameters() const {
  std::set<std::string> modules;
  for (const auto& p : parameters_) modules.insert(module_of(p.name));
  // A module is a leaf when no other module lies under it; a non-leaf module's own arrays (e.g. an
  // attention's sinks) are not counted, as leaf_modules() never yields it.
  auto is_leaf = [&](const std::string& m) {
    const std::string prefix = m.empty() ? std::string() : m + ".";
    auto it = modules.upper_bound(m);
    return it == modules.end() || it->compare(0, prefix.size(), prefix) != 0;
  };
  std::map<std::string, const io::QuantSpec*> quantized;
  for (const auto& m : modules_)
    if (m.spec) quantized[m.info.path] = &*m.spec;
  uint64_t total = 0;
  for (const auto& p : parameters_) {
    const auto m = module_of(p.name);
    if (!is_leaf(m)) continue;
    auto q = quantized.find(m);
    if (q == quantized.end()) {
      total += p.value.size();
      continue;
    }
    const auto leaf = p.name.substr(m.size() + 1);
    if (leaf == "weight") total += static_cast<uint64_t>(p.value.size()) * 32 / static_cast<uint64_t>(q->second->bits);
    else if (leaf == "bias") total += p.value.size();
  }
  return total;
}

uint64_t MlxParameters::total_bytes() const {
  uint64_t total = 0;
  for (const auto& p : parameters_) total += p.value.nbytes();
  return total;
}

}  // namespace mlxrt::convert
