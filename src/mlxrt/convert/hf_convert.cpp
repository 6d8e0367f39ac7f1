// Port of mlx_lm/convert.py's convert() and the save path of mlx_lm/utils.py (save, save_model,
// make_shards, save_config, create_model_card), mlx-lm 0.32.2.
#include "mlxrt/convert/hf_convert.h"

#include <cstdio>
#include <fstream>
#include <ostream>
#include <unordered_map>

#include <mlx/io.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/convert/mlx_parameters.h"
#include "mlxrt/convert/parameter_order.h"
#include "mlxrt/convert/progress.h"
#include "mlxrt/convert/staging_dir.h"
#include "mlxrt/io/hf_cache.h"
#include "mlxrt/model/loader.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"
#include "mlxrt/util/python_json.h"

namespace mlxrt::convert {

namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

// The files of a tokenizer as the Hugging Face loaders find them; copied byte for byte.
bool is_tokenizer_file(const std::string& name) {
  static const char* const names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                      "added_tokens.json", "vocab.json", "merges.txt", "vocab.txt",
                                      "tokenizer.model", "spiece.model", "tiktoken.model",
                                      "chat_template.jinja", "chat_template.json"};
  for (const char* n : names)
    if (name == n) return true;
  return name.size() > 9 && name.compare(name.size() - 9, 9, ".tiktoken") == 0;
}

ordered_json read_ordered_json(const fs::path& path) {
  const std::string text = read_text_file(path);
  try {
    return ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

// load_config: config.json, with generation_config.json's eos_token_id when it has a true one.
ordered_json load_source_config(const fs::path& dir) {
  auto config = read_ordered_json(dir / "config.json");
  if (!config.is_object()) throw ConfigError((dir / "config.json").string() + ": expected a JSON object");
  const auto gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path)) {
    ordered_json gen;
    try {
      gen = ordered_json::parse(read_text_file(gen_path));
    } catch (const nlohmann::json::exception&) {
      // load_config ignores a generation_config.json that is not JSON.
    }
    if (gen.is_object() && gen.contains("eos_token_id")) {
      const auto& eos = gen["eos_token_id"];
      const bool truthy = !(eos.is_null() || (eos.is_boolean() && !eos.get<bool>()) ||
                            (eos.is_number() && eos.get<double>() == 0) || (eos.is_array() && eos.empty()) ||
                            (eos.is_string() && eos.get<std::string>().empty()));
      if (truthy) config["eos_token_id"] = eos;
    }
  }
  // load_model: a quantization_config kept under text_config moves to the top level, and the
  // legacy mxfp4 / mxfp8 quant methods become an MLX quantization section.
  if (!config.contains("quantization_config") && config.contains("text_config") && config["text_config"].is_object() &&
      config["text_config"].contains("quantization_config"))
    config["quantization_config"] = config["text_config"]["quantization_config"];
  if (!config.contains("quantization") && config.contains("quantization_config") &&
      config["quantization_config"].is_object()) {
    const std::string method = config["quantization_config"].value("quant_method", "");
    if (method == "mxfp4" || method == "mxfp8") {
      ordered_json q{{"group_size", 32}, {"bits", method == "mxfp4" ? 4 : 8}, {"mode", method}};
      config["quantization"] = q;
      config["quantization_config"] = q;
    }
  }
  return config;
}

// cast_predicate: the models that keep some parameters in their saved dtype.
bool keeps_dtype(const std::string& model_type, const std::string& path) {
  if (model_type == "qwen3_5" || model_type == "qwen3_5_moe")
    return path.size() >= 5 && path.compare(path.size() - 5, 5, "A_log") == 0;
  return false;
}

mx::Dtype dtype_named(const std::string& name) {
  if (name == "float16") return mx::float16;
  if (name == "bfloat16") return mx::bfloat16;
  return mx::float32;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f.flush()) throw Error(path.string() + ": cannot write");
}

// create_model_card: the "mlx" library card (a repo id becomes base_model).
std::string model_card(const std::optional<std::string>& repo) {
  std::string card = "---\nlanguage: en\n";
  if (repo) card += "base_model: " + *repo + "\n";
  return card + "library_name: mlx\npipeline_tag: text-generation\ntags:\n- mlx\n---\n";
}

std::string shard_file_name(size_t i, size_t count) {
  if (count == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, count);
  return buf;
}

}  // namespace

bool is_conversion_dtype(const std::string& name) {
  return name == "float16" || name == "bfloat16" || name == "float32";
}

HfConvertSummary convert_hf(const HfConvertOptions& options, std::ostream& info) {
  if (options.quantize && options.dequantize)
    throw UsageError("convert: choose either -q/--quantize or -d/--dequantize, not both");
  if (options.dtype && !is_conversion_dtype(*options.dtype))
    throw UsageError("--dtype " + *options.dtype + ": expected one of float16, bfloat16, float32");
  const fs::path source = io::resolve_path_or_hf_repo(options.hf_path, "--hf-path");
  std::optional<std::string> repo;
  if (!fs::exists(options.hf_path)) repo = options.hf_path.substr(0, options.hf_path.find('@'));
  StagingDir staging(options.mlx_path, "--mlx-path", /*allow_empty=*/false);

  info << "[INFO] Loading" << std::endl;
  ordered_json config = load_source_config(source);
  if (config.contains("model_file"))
    throw UnsupportedError((source / "config.json").string() + ": the model needs its own Python code (model_file " +
                           config["model_file"].dump() + "), which mlxrt cannot run");
  auto bound = model::bind_checkpoint(source);
  const std::string model_type = bound.config.model_type();
  MlxParameters params(python_parameter_order(model_type, std::move(bound.tensors)), std::move(bound.modules));
  const nlohmann::json plain_config = nlohmann::json::parse(config.dump());

  // dtype: the flag, else config's torch_dtype, else text_config's dtype.
  std::optional<std::string> dtype = options.dtype;
  if (!dtype && config.contains("torch_dtype") && config["torch_dtype"].is_string())
    dtype = config["torch_dtype"].get<std::string>();
  if (!dtype && !config.contains("torch_dtype") && config.contains("text_config") && config["text_config"].is_object() &&
      config["text_config"].contains("dtype") && config["text_config"]["dtype"].is_string())
    dtype = config["text_config"]["dtype"].get<std::string>();
  if (dtype && is_conversion_dtype(*dtype)) {
    info << "[INFO] Using dtype: " << *dtype << std::endl;
    params.cast_floating(dtype_named(*dtype), [&](const std::string& p) { return keeps_dtype(model_type, p); });
  }

  if (options.quantize) {
    info << "[INFO] Quantizing" << std::endl;
    const bool fine_grained = config.contains("quantization");
    const auto global = global_quant_spec(options.quant);
    validate_quant_spec(global, "-q");
    auto predicate = quant_predicate(options.quant, plain_config, params, fine_grained);
    auto done = params.quantize(predicate);
    if (!fine_grained)
      config["quantization"] = ordered_json{{"group_size", global.group_size}, {"bits", global.bits}, {"mode", global.mode}};
    for (const auto& [path, decision] : done)
      if (!decision.recorded.is_null()) config["quantization"][path] = decision.recorded;
    config["quantization_config"] = config["quantization"];
    char bpw[64];
    std::snprintf(bpw, sizeof(bpw), "%.3f",
                  static_cast<double>(params.total_bytes()) * 8 / static_cast<double>(params.total_parameters()));
    info << "[INFO] Quantized model with " << bpw << " bits per weight." << std::endl;
  }
  if (options.dequantize) {
    info << "[INFO] Dequantizing" << std::endl;
    config.erase("quantization");
    config.erase("quantization_config");
    params.dequantize();
  }

  // save_model: shards of at most max_shard_bytes in parameter order (a larger tensor alone).
  std::vector<std::vector<size_t>> shards;
  uint64_t shard_size = 0;
  const auto& list = params.parameters();
  for (size_t i = 0; i < list.size(); ++i) {
    const uint64_t n = list[i].value.nbytes();
    if (shards.empty() || shard_size + n > options.max_shard_bytes) {
      shards.emplace_back();
      shard_size = 0;
    }
    shards.back().push_back(i);
    shard_size += n;
  }
  HfConvertSummary summary;
  summary.model_type = model_type;
  summary.shards = static_cast<int>(shards.size());
  ordered_json index{{"metadata", {{"total_size", params.total_bytes()}, {"total_parameters", params.total_parameters()}}},
                     {"weight_map", ordered_json::object()}};
  std::map<std::string, std::string> weight_map;
  {
    Progress progress("converting", list.size(), options.progress);
    size_t done = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
      const auto name = shard_file_name(s, shards.size());
      // Inserted in parameter order, as mlx.core.save_safetensors receives the shard's dict: the
      // map's iteration order (and so the file's data order) follows from it.
      std::unordered_map<std::string, mx::array> arrays;
      for (size_t i : shards[s]) {
        mx::eval(list[i].value);
        progress.update(++done, list[i].name);
        arrays.insert({list[i].name, list[i].value});
        weight_map[list[i].name] = name;
        summary.bytes += list[i].value.nbytes();
        ++summary.tensors;
      }
      try {
        mx::save_safetensors((staging.path() / name).string(), std::move(arrays), {{"format", "mlx"}});
      } catch (const std::exception& e) {
        throw Error("--mlx-path " + options.mlx_path.string() + ": cannot write " + name + " (" + e.what() + ")");
      }
    }
  }
  for (const auto& [k, v] : weight_map) index["weight_map"][k] = v;
  util::DumpOptions indent4;
  indent4.indent = 4;
  write_text(staging.path() / "model.safetensors.index.json", util::python_dumps(index, indent4));

  // save_config: no _name_or_path, no vision_config (mlxrt's families are text models), the
  // quantization section mirrored, top-level keys sorted.
  config.erase("_name_or_path");
  config.erase("vision_config");
  if (config.contains("quantization")) config["quantization_config"] = config["quantization"];
  std::vector<std::string> keys;
  for (auto it = config.begin(); it != config.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  ordered_json sorted = ordered_json::object();
  for (const auto& k : keys) sorted[k] = config[k];
  write_text(staging.path() / "config.json", util::python_dumps(sorted, indent4));

  // The tokenizer's files, the model's *.py files and generation_config.json, as they are.
  for (const auto& entry : fs::directory_iterator(source)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const bool py = name.size() > 3 && name.compare(name.size() - 3, 3, ".py") == 0;
    const bool tokenizer = is_tokenizer_file(name);
    if (!tokenizer && !py && name != "generation_config.json") continue;
    fs::copy_file(entry.path(), staging.path() / name, fs::copy_options::overwrite_existing);
    if (tokenizer) ++summary.tokenizer_files;
  }
  write_text(staging.path() / "README.md", model_card(repo));
  staging.commit();
  return summary;
}

}  // namespace mlxrt::convert
