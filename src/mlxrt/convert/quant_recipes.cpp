// Ports of mlx_lm/convert.py's mixed_quant_predicate_builder, quantize_model's wrapped predicate
// (mlx_lm/utils.py) and the models' quant_predicate properties (mlx-lm 0.32.2).
#include "mlxrt/convert/quant_recipes.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(path.substr(start, dot - start));
  parts.push_back(path.substr(start));
  return parts;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// A predicate's answer before quantize_model's wrapping: false, true, or a dict of parameters.
struct Answer {
  bool quantize = true;
  ordered_json params;  // null unless a dict was returned
};
using ModulePredicate = std::function<Answer(const std::string& path)>;

ordered_json eight_bit() { return ordered_json{{"group_size", 64}, {"bits", 8}}; }

// The quant_predicate of the model class mlx-lm builds for this config (None for most).
std::optional<ModulePredicate> model_quant_predicate(const json& config) {
  const std::string type = config.value("model_type", "");
  auto gates = [](std::vector<std::string> tails) -> ModulePredicate {
    return [tails](const std::string& path) {
      for (const auto& t : tails)
        if (ends_with(path, t)) return Answer{true, eight_bit()};
      return Answer{};
    };
  };
  if (type == "qwen3_moe") return gates({"mlp.gate"});
  if (type == "gpt_oss") return gates({"router"});
  if (type == "qwen3_next") return gates({"mlp.gate", "shared_expert_gate"});
  if (type == "gemma4" || type == "gemma4_text") return gates({"router.proj"});
  if (type == "qwen3_5" || type == "qwen3_5_moe") {
    // TextModel.quant_predicate is None for a dense model (num_experts <= 0).
    const json& text = config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
    const auto experts = text.contains("num_experts") && text["num_experts"].is_number() ? text["num_experts"].get<double>() : 0.0;
    if (experts <= 0) return std::nullopt;
    return gates({"mlp.gate", "shared_expert_gate"});
  }
  if (type == "granite") {
    return [](const std::string& path) {
      if (ends_with(path, "self_attn.o_proj") || ends_with(path, "mlp.down_proj") || path == "lm_head")
        return Answer{true, eight_bit()};
      return Answer{};
    };
  }
  return std::nullopt;
}

ModulePredicate mixed_recipe(const std::string& recipe, const MlxParameters& parameters,
                             std::optional<int> group_size) {
  int low_bits = 0, high_bits = 6;
  if (recipe == "mixed_2_6") low_bits = 2;
  else if (recipe == "mixed_3_4") low_bits = 3, high_bits = 4;
  else if (recipe == "mixed_3_6") low_bits = 3;
  else if (recipe == "mixed_4_6") low_bits = 4;
  else throw UsageError("--quant-predicate: invalid quant recipe " + recipe);
  const auto paths = parameters.module_paths();
  auto down = std::find_if(paths.begin(), paths.end(), [](const std::string& p) { return p.find("down_proj") != std::string::npos; });
  if (down == paths.end()) throw UnsupportedError("--quant-predicate " + recipe + ": the model does not have expected keys for mixed quant (no down_proj)");
  // The layer index's position in the path: the first numeric component (else the last one).
  const auto parts = split_path(*down);
  size_t layer_location = 0;
  while (layer_location + 1 < parts.size() && !all_digits(parts[layer_location])) ++layer_location;
  std::set<std::string> layers;
  for (const auto& p : parameters.parameters()) {
    auto ps = split_path(p.name);
    if (ps.size() > layer_location && all_digits(ps[layer_location])) layers.insert(ps[layer_location]);
  }
  const int num_layers = static_cast<int>(layers.size());
  const json gs = group_size ? json(*group_size) : json(nullptr);
  return [=](const std::string& path) {
    const auto ps = split_path(path);
    int index = 0;
    if (ps.size() > layer_location) {
      if (!all_digits(ps[layer_location]))
        throw UnsupportedError("--quant-predicate " + recipe + ": " + path + " has no layer index where " + *down + " has one");
      index = std::stoi(ps[layer_location]);
    }
    // Python's // and % floor; every operand here is a count or an index, so C++'s agree except
    // for (index - num_layers / 8) % 3 with a negative left side.
    const int eighth = num_layers / 8;
    int rem = (index - eighth) % 3;
    if (rem < 0) rem += 3;
    const bool more = index < eighth || index >= 7 * num_layers / 8 || rem == 2;
    auto params = [&](int bits) {
      return Answer{true, ordered_json{{"group_size", gs}, {"bits", bits}, {"mode", "affine"}}};
    };
    const bool v = path.find("v_proj") != std::string::npos || path.find("v_a_proj") != std::string::npos ||
                   path.find("v_b_proj") != std::string::npos;
    if (v && more) return params(high_bits);
    if (path.find("down_proj") != std::string::npos && more) return params(high_bits);
    if (path.find("lm_head") != std::string::npos) return params(high_bits);
    return params(low_bits);
  };
}

// nn.Module.to_quantized(**params): omitted arguments take the layer's defaults (mode "affine";
// group size and bits the mode's).
io::QuantSpec spec_from(const ordered_json& params) {
  io::QuantSpec s = io::defaults_for_mode(params.contains("mode") ? params["mode"].get<std::string>() : "affine");
  if (params.contains("group_size") && !params["group_size"].is_null()) s.group_size = params["group_size"].get<int>();
  if (params.contains("bits") && !params["bits"].is_null()) s.bits = params["bits"].get<int>();
  return s;
}

}  // namespace

const std::vector<std::string>& quant_recipes() {
  static const std::vector<std::string> recipes{"mixed_2_6", "mixed_3_4", "mixed_3_6", "mixed_4_6"};
  return recipes;
}

io::QuantSpec global_quant_spec(const QuantRequest& request) {
  io::QuantSpec s = io::defaults_for_mode(request.mode);
  if (request.group_size) s.group_size = *request.group_size;
  if (request.bits) s.bits = *request.bits;
  return s;
}

MlxParameters::Predicate quant_predicate(const QuantRequest& request, const json& config,
                                         const MlxParameters& parameters, bool fine_grained) {
  std::optional<ModulePredicate> chosen;
  if (request.recipe) {
    if (request.mode != "affine") throw UsageError("--quant-predicate: quant predicates only support 'affine' quantization");
    chosen = mixed_recipe(*request.recipe, parameters, request.group_size);
  } else {
    chosen = model_quant_predicate(config);
  }
  const io::QuantSpec global = global_quant_spec(request);
  const ordered_json global_params{{"group_size", global.group_size}, {"bits", global.bits}, {"mode", global.mode}};
  return [=](const std::string& path, const model::QuantizableModule&, const mx::array& weight)
             -> std::optional<MlxParameters::Decision> {
    if (weight.shape(-1) % global.group_size != 0) return std::nullopt;
    Answer answer;
    if (chosen) answer = (*chosen)(path);
    if (!answer.quantize) return std::nullopt;
    if (!answer.params.is_null()) return MlxParameters::Decision{spec_from(answer.params), answer.params};
    return MlxParameters::Decision{global, fine_grained ? global_params : ordered_json()};
  };
}

}  // namespace mlxrt::convert
