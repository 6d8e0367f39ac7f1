// Port of mlx_lm/tuner/lora.py, mlx_lm/tuner/dora.py and load_adapters / linear_to_lora_layers of
// mlx_lm/tuner/utils.py (mlx-lm 0.32.2).
#include "mlxrt/model/nn/lora.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <mlx/io.h>
#include <mlx/linalg.h>
#include <mlx/ops.h>

#include "mlxrt/io/safetensors_header.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::model::nn {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const mx::Shape& s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << (s.size() == 1 ? ",)" : ")");
  return o.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The decoder layer a module path lies in ("...layers.<N>.<rest>"): N and the path inside the layer.
std::optional<std::pair<int, std::string>> layer_of(const std::string& path) {
  for (size_t at = path.find("layers."); at != std::string::npos; at = path.find("layers.", at + 1)) {
    if (at > 0 && path[at - 1] != '.') continue;
    size_t i = at + 7, digits = 0;
    long long n = 0;
    while (i < path.size() && std::isdigit(static_cast<unsigned char>(path[i])) && digits < 9)
      n = n * 10 + (path[i++] - '0'), ++digits;
    if (digits > 0 && i < path.size() && path[i] == '.') return std::pair{static_cast<int>(n), path.substr(i + 1)};
  }
  return std::nullopt;
}

// `self.scale * z`: a Python float against an array takes the array's dtype.
mx::array scaled(double scale, const mx::array& z) { return mx::multiply(mx::array(static_cast<float>(scale), z.dtype()), z); }

AdapterConfig parse_config(const fs::path& file) {
  const json raw = read_json_file(file);
  const std::string src = file.string();
  if (!raw.is_object()) throw ConfigError(src + ": expected a JSON object");
  JsonFields f(raw, src);
  AdapterConfig c;
  c.fine_tune_type = f.value_or<std::string>("fine_tune_type", "lora");
  if (c.fine_tune_type != "lora" && c.fine_tune_type != "dora" && c.fine_tune_type != "full")
    throw ConfigError(src + ": key 'fine_tune_type' is '" + c.fine_tune_type +
                      "': expected 'lora', 'dora' or 'full' (the types mlx_lm.lora trains)");
  c.num_layers = f.required<int>("num_layers");
  if (c.fine_tune_type == "full") return c;
  if (!f.has("lora_parameters") || !raw["lora_parameters"].is_object())
    throw ConfigError(src + ": key 'lora_parameters' must be an object with 'rank', 'scale' and 'dropout'" +
                      (f.has("lora_parameters") ? ", got " + json_type_name(raw["lora_parameters"]) : ""));
  JsonFields p(raw["lora_parameters"], src + " lora_parameters");
  if (!p.has("scale") && p.has("alpha"))
    throw ConfigError(p.source() + ": missing required key 'scale' (found 'alpha': mlx-lm's LoRA config uses "
                                   "'scale', not 'alpha')");
  c.rank = p.required<int>("rank");
  if (c.rank < 1) throw ConfigError(p.source() + ": key 'rank' must be a positive integer, got " + std::to_string(c.rank));
  c.scale = p.required<double>("scale");
  c.dropout = p.required<double>("dropout");
  if (!(c.dropout >= 0 && c.dropout < 1))
    throw ConfigError(p.source() + ": key 'dropout' must be in [0, 1), got " + raw["lora_parameters"]["dropout"].dump());
  if (p.has("keys")) {
    const json& keys = raw["lora_parameters"]["keys"];
    if (!keys.is_array()) throw ConfigError(p.source() + ": key 'keys' must be a list of module names, got " + json_type_name(keys));
    std::set<std::string> k;
    for (const auto& v : keys) {
      if (!v.is_string()) throw ConfigError(p.source() + ": key 'keys' must hold strings, got " + json_type_name(v));
      k.insert(v.get<std::string>());
    }
    c.keys = std::move(k);
  }
  return c;
}

}  // namespace

bool is_adapter_leaf(const std::string& name) {
  return ends_with(name, ".lora_a") || ends_with(name, ".lora_b") || ends_with(name, ".m");
}

std::shared_ptr<Adapter> Adapter::load(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw ConfigError("--adapter-path " + dir.string() + ": no such directory (an mlx_lm.lora adapter directory "
                      "holds adapter_config.json and adapters.safetensors)");
  auto adapter = std::make_shared<Adapter>();
  adapter->dir_ = dir;
  const auto config_file = dir / "adapter_config.json";
  if (!fs::exists(config_file, ec))
    throw ConfigError(config_file.string() + ": missing (an mlx_lm.lora adapter directory holds "
                      "adapter_config.json and adapters.safetensors)");
  adapter->config_ = parse_config(config_file);
  adapter->file_ = dir / "adapters.safetensors";
  if (!fs::exists(adapter->file_, ec))
    throw WeightsError(adapter->file_.string() + ": missing (the adapter's weights, as mlx_lm.lora saves them)");
  io::read_safetensors_header(adapter->file_);  // validates the header before MLX reads it
  try {
    for (auto& [name, a] : mx::load_safetensors(adapter->file_.string()).first) adapter->tensors_.insert_or_assign(name, a);
  } catch (const std::exception& e) {
    throw WeightsError(adapter->file_.string() + ": " + e.what());
  }
  if (!adapter->full()) {
    // load_adapters allows only the adapter leaves (lora_a, lora_b, m) of a LoRA / DoRA adapter.
    std::vector<std::string> bad;
    for (const auto& [name, _] : adapter->tensors_)
      if (!is_adapter_leaf(name)) bad.push_back(name);
    if (!bad.empty()) {
      std::sort(bad.begin(), bad.end());
      std::string list;
      for (size_t i = 0; i < bad.size() && i < 10; ++i) list += (i ? ", " : "") + bad[i];
      throw WeightsError(adapter->file_.string() + ": " + list + (bad.size() > 10 ? ", ..." : "") +
                         ": not an adapter parameter (a " + adapter->config_.fine_tune_type +
                         " adapter holds only <module>.lora_a, .lora_b" +
                         (adapter->config_.fine_tune_type == "dora" ? " and .m" : "") + ")");
    }
  }
  if (!adapter->full()) {
    std::set<std::string> modules;
    for (const auto& [name, _] : adapter->tensors_) modules.insert(name.substr(0, name.rfind('.')));
    adapter->wrapped_ = static_cast<int>(modules.size());
  }
  return adapter;
}

bool Adapter::selects(const std::string& path) const {
  const auto& keys = config_.keys;
  // linear_to_lora_layers' second pass: model.named_modules() whose full path is a key.
  if (keys && keys->count(path)) return true;
  auto layer = layer_of(path);
  if (!layer) return false;
  // model.layers[-max(num_layers, 0):]: every layer when num_layers is 0 or negative.
  const int n = std::max(config_.num_layers, 0);
  if (n > 0 && layers_ >= 0 && layer->first < layers_ - n) return false;
  // Without keys every Linear / Embedding inside a layer is adapted.
  return !keys || keys->count(layer->second) > 0;
}

std::shared_ptr<const LoraDelta> Adapter::take(const std::string& path, int rows, int cols, int m_size,
                                               const std::function<mx::array()>& dora_magnitude) {
  if (full()) return nullptr;
  const bool dora = config_.fine_tune_type == "dora";
  auto a_it = tensors_.find(path + ".lora_a");
  auto b_it = tensors_.find(path + ".lora_b");
  auto m_it = tensors_.find(path + ".m");
  if (a_it == tensors_.end() && b_it == tensors_.end() && m_it == tensors_.end()) return nullptr;
  if (!selects(path)) return nullptr;  // finish() names the tensors as matching no adapted layer
  std::vector<std::string> missing;
  if (a_it == tensors_.end()) missing.push_back(path + ".lora_a");
  if (b_it == tensors_.end()) missing.push_back(path + ".lora_b");
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size(); ++i) list += (i ? " and " : "") + missing[i];
    throw WeightsError(file_.string() + ": " + list + " missing: the adapter adapts " + path +
                       " (it holds its other tensors), so it needs both lora_a and lora_b");
  }
  auto check = [&](const std::string& name, const mx::array& t, const mx::Shape& want) {
    if (t.shape() != want)
      misshaped_.push_back(name + ": the adapter has shape " + shape_str(t.shape()) + " but this model needs " +
                           shape_str(want));
  };
  auto delta = std::make_shared<LoraDelta>(LoraDelta{a_it->second, b_it->second, std::nullopt, config_.scale, dora});
  check(a_it->first, delta->a, {rows, config_.rank});
  check(b_it->first, delta->b, {config_.rank, cols});
  taken_.push_back(delta->a);
  taken_.push_back(delta->b);
  tensors_.erase(a_it);
  tensors_.erase(b_it);
  m_it = tensors_.find(path + ".m");
  if (m_it != tensors_.end()) {
    if (dora) {
      check(m_it->first, m_it->second, {m_size});
      delta->m = m_it->second;
      taken_.push_back(*delta->m);
      tensors_.erase(m_it);
    }
  } else if (dora) {
    delta->m = dora_magnitude();
  }
  return delta;
}

std::shared_ptr<const LoraDelta> Adapter::take_switch(const std::string& path, int num_experts, int input_dims,
                                                      int output_dims) {
  if (full()) return nullptr;
  auto a_it = tensors_.find(path + ".lora_a");
  auto b_it = tensors_.find(path + ".lora_b");
  auto m_it = tensors_.find(path + ".m");
  if (a_it == tensors_.end() && b_it == tensors_.end() && m_it == tensors_.end()) return nullptr;
  if (!selects(path)) return nullptr;  // finish() names the tensors as matching no adapted layer
  if (config_.fine_tune_type == "dora")
    throw UnsupportedError(file_.string() + ": " + path + " is a mixture-of-experts switch layer: SwitchLinear "
                           "doesn't support DoRA yet (mlx-lm refuses it too)");
  if (a_it == tensors_.end() || b_it == tensors_.end())
    throw WeightsError(file_.string() + ": " + path + (a_it == tensors_.end() ? ".lora_a" : ".lora_b") +
                       " missing: the adapter adapts " + path + " (it holds its other tensors), so it needs both "
                       "lora_a and lora_b");
  auto check = [&](const std::string& name, const mx::array& t, const mx::Shape& want) {
    if (t.shape() != want)
      misshaped_.push_back(name + ": the adapter has shape " + shape_str(t.shape()) + " but this model needs " +
                           shape_str(want));
  };
  auto delta = std::make_shared<LoraDelta>(LoraDelta{a_it->second, b_it->second, std::nullopt, config_.scale, false});
  check(a_it->first, delta->a, {num_experts, config_.rank, input_dims});
  check(b_it->first, delta->b, {num_experts, output_dims, config_.rank});
  taken_.push_back(delta->a);
  taken_.push_back(delta->b);
  tensors_.erase(a_it);
  tensors_.erase(b_it);
  return delta;
}

void Adapter::finish() const {
  if (full()) return;  // a full fine-tune's tensors were checked against the base ones (prepare_adapter)
  std::ostringstream msg;
  std::vector<std::string> extra;
  for (const auto& [name, _] : tensors_) extra.push_back(name);
  std::sort(extra.begin(), extra.end());
  for (const auto& p : misshaped_) msg << "\n  " << p;
  for (size_t i = 0; i < extra.size() && i < 20; ++i)
    msg << "\n  " << extra[i] << ": matches no layer this adapter adapts in the model (adapter_config.json: "
        << "num_layers " << config_.num_layers << (config_.keys ? ", keys" : ", every Linear/Embedding") << ")";
  if (extra.size() > 20) msg << "\n  ... (" << extra.size() - 20 << " more)";
  if (!msg.str().empty())
    throw WeightsError(file_.string() + ": the adapter does not fit this model (an adapter of another base "
                       "model?):" + msg.str());
}


mx::array lora_linear(const LoraDelta& d, const mx::array& x, const std::function<mx::array(const mx::array&)>& linear,
                      const std::function<mx::array()>& weight, const std::optional<mx::array>& bias) {
  if (!d.dora) {
    // LoRALinear: y = linear(x); z = (dropout(x) @ lora_a) @ lora_b; y + (scale * z).astype(x.dtype)
    auto y = linear(x);
    auto z = mx::matmul(mx::matmul(x, d.a), d.b);
    return mx::add(y, mx::astype(scaled(d.scale, z), x.dtype()));
  }
  // DoRALinear: the (dequantized) weight without its bias, rescaled per output by m / |W + scale B^T A^T|.
  auto w = weight();
  auto y = mx::matmul(x, mx::transpose(w));
  auto z = mx::matmul(mx::matmul(x, d.a), d.b);
  auto out = mx::add(y, mx::astype(scaled(d.scale, z), x.dtype()));
  auto adapted = mx::add(w, mx::matmul(scaled(d.scale, mx::transpose(d.b)), mx::transpose(d.a)));
  auto denom = mx::linalg::norm(adapted, std::vector<int>{1}, false);
  out = mx::multiply(mx::astype(mx::divide(*d.m, denom), x.dtype()), out);
  if (bias) out = mx::add(out, *bias);
  return out;
}

mx::array lora_switch(const LoraDelta& d, const mx::array& x, const mx::array& y, const mx::array& indices,
                      bool sorted_indices) {
  // z = gather_mm(dropout(x), lora_a^T, rhs_indices=indices); z = gather_mm(z, lora_b^T, ...);
  // y + (scale * z).astype(x.dtype)
  auto z = mx::gather_mm(x, mx::swapaxes(d.a, -1, -2), std::nullopt, indices, sorted_indices);
  z = mx::gather_mm(z, mx::swapaxes(d.b, -1, -2), std::nullopt, indices, sorted_indices);
  return mx::add(y, mx::astype(scaled(d.scale, z), x.dtype()));
}

mx::array lora_embedding(const LoraDelta& d, const mx::array& ids, const mx::array& y) {
  if (!d.dora) {
    // LoRAEmbedding: z = dropout(lora_a[x] @ lora_b); y + (scale * z).astype(y.dtype)
    auto z = mx::matmul(mx::take(d.a, ids, 0), d.b);
    return mx::add(y, mx::astype(scaled(d.scale, z), y.dtype()));
  }
  // DoRAEmbedding: z = scale * lora_a[x] @ lora_b; out = y + dropout(z).astype(y.dtype);
  // out = (m[x] / |y + z|)[..., None] * out
  auto z = mx::matmul(scaled(d.scale, mx::take(d.a, ids, 0)), d.b);
  auto out = mx::add(y, mx::astype(z, y.dtype()));
  auto denom = mx::linalg::norm(mx::add(y, z), std::vector<int>{-1}, false);
  return mx::multiply(mx::expand_dims(mx::divide(mx::take(*d.m, ids, 0), denom), -1), out);
}

mx::array lora_embedding_as_linear(const LoraDelta& d, const mx::array& x, const mx::array& y,
                                   const std::function<mx::array()>& weight) {
  // z = (dropout(x) @ lora_b.T) @ lora_a.T; out = y + (scale * z).astype(x.dtype)
  auto z = mx::matmul(mx::matmul(x, mx::transpose(d.b)), mx::transpose(d.a));
  auto out = mx::add(y, mx::astype(scaled(d.scale, z), x.dtype()));
  if (!d.dora) return out;
  auto adapted = mx::add(weight(), mx::matmul(scaled(d.scale, d.a), d.b));
  auto denom = mx::linalg::norm(adapted, std::vector<int>{1}, false);
  return mx::multiply(mx::divide(*d.m, denom), out);
}

mx::array fused_linear_weight(const LoraDelta& d, const mx::array& weight) {
  // LoRALinear.fuse: delta = ((scale * lora_b.T) @ lora_a.T).astype(weight.dtype); weight + delta.
  auto w = mx::add(weight, mx::astype(mx::matmul(scaled(d.scale, mx::transpose(d.b)), mx::transpose(d.a)), weight.dtype()));
  if (!d.dora) return w;
  // DoRALinear.fuse: (m / norm(weight, axis=1))[:, None] * weight.
  auto norm_scale = mx::divide(*d.m, mx::linalg::norm(w, std::vector<int>{1}, false));
  return mx::multiply(mx::expand_dims(norm_scale, 1), w);
}

mx::array fused_embedding_weight(const LoraDelta& d, const mx::array& weight) {
  // LoRAEmbedding.fuse / DoRAEmbedding.fuse: weight + ((scale * lora_a) @ lora_b).astype(weight.dtype).
  auto w = mx::add(weight, mx::astype(mx::matmul(scaled(d.scale, d.a), d.b), weight.dtype()));
  if (!d.dora) return w;
  auto norm_scale = mx::divide(*d.m, mx::linalg::norm(w, std::vector<int>{1}, false));
  return mx::multiply(mx::expand_dims(norm_scale, 1), w);
}

mx::array fused_switch_weight(const LoraDelta& d, const mx::array& weight) {
  // LoRASwitchLinear.fuse: weight + ((scale * lora_b) @ lora_a.reshape(E, -1, in)).astype(weight.dtype).
  const auto& s = weight.shape();
  auto a = mx::reshape(d.a, {s[0], -1, s[2]});
  return mx::add(weight, mx::astype(mx::matmul(scaled(d.scale, d.b), a), weight.dtype()));
}

}  // namespace mlxrt::model::nn
