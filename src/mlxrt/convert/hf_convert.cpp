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

#include "mlxrt/convert/mlx_checkpoint_writer.h"
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

  auto saved = save_mlx_checkpoint(staging.path(), std::move(params), std::move(config), source, repo, options.max_shard_bytes,
                                   options.progress);
  HfConvertSummary summary{model_type, saved.tensors, saved.bytes, saved.shards, saved.tokenizer_files};
  staging.commit();
  return summary;
}

}  // namespace mlxrt::convert
