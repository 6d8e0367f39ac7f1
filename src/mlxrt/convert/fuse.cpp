// Port of mlx_lm/fuse.py's main() (mlx-lm 0.32.2), without the GGUF export and upload.
#include "mlxrt/convert/fuse.h"

#include <ostream>

#include "mlxrt/convert/mlx_checkpoint_writer.h"
#include "mlxrt/convert/mlx_parameters.h"
#include "mlxrt/convert/parameter_order.h"
#include "mlxrt/convert/staging_dir.h"
#include "mlxrt/io/hf_cache.h"
#include "mlxrt/model/loader.h"

namespace mlxrt::convert {

namespace fs = std::filesystem;

FuseSummary fuse_adapter(const FuseOptions& options, std::ostream& info) {
  info << "Loading pretrained model" << std::endl;
  const fs::path source = io::resolve_path_or_hf_repo(options.model, "--model");
  const fs::path adapter = io::resolve_path_or_hf_repo(options.adapter_path, "--adapter-path");
  std::optional<std::string> repo;
  if (!fs::exists(options.model)) repo = options.model.substr(0, options.model.find('@'));
  StagingDir staging(options.save_path, "--save-path");

  auto config = load_source_config(source);
  auto bound = model::bind_checkpoint(source, adapter);
  const std::string model_type = bound.config.model_type();
  MlxParameters params(python_parameter_order(model_type, std::move(bound.tensors)), std::move(bound.modules));
  FuseSummary summary;
  summary.fused_modules = params.fuse(options.dequantize);
  if (options.dequantize) {
    info << "Dequantizing model" << std::endl;
    params.dequantize();
    config.erase("quantization");
    config.erase("quantization_config");
  }
  auto saved = save_mlx_checkpoint(staging.path(), std::move(params), std::move(config), source, repo, options.max_shard_bytes,
                                   options.progress);
  summary.shards = saved.shards;
  staging.commit();
  return summary;
}

}  // namespace mlxrt::convert
