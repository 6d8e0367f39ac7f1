// `mlxrt fuse`: mlx_lm.fuse's flags (--model, --save-path, --adapter-path, --dequantize): an
// adapter fused into the base model's weights, written as mlx_lm.fuse writes it.
#include <cstdlib>
#include <iostream>
#include <string>

#include "mlxrt/cli/verbs.h"
#include "mlxrt/convert/fuse.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

void register_fuse(CLI::App& app) {
  auto* cmd = app.add_subcommand("fuse", "Fuse fine-tuned adapters into the base model (as mlx_lm.fuse)");
  struct Flags {
    convert::FuseOptions options;
    std::string upload_repo, gguf_path;
    bool export_gguf = false, trust_remote_code = false, quiet = false;
  };
  auto flags = std::make_shared<Flags>();
  auto& o = flags->options;
  cmd->add_option("--model", o.model, "the base model: a local directory or a Hugging Face repo id in the local cache");
  cmd->add_option("--save-path", o.save_path, "the path to save the fused model (default fused_model)");
  cmd->add_option("--adapter-path", o.adapter_path, "path to the trained adapter weights and config (default adapters)");
  cmd->add_flag("--dequantize", o.dequantize, "generate a dequantized model");
  cmd->add_option("--upload-repo", flags->upload_repo, "not supported: mlxrt does not upload (use huggingface-cli upload)");
  cmd->add_flag("--export-gguf", flags->export_gguf, "not supported: export GGUF with mlx_lm.fuse");
  cmd->add_option("--gguf-path", flags->gguf_path, "not supported (see --export-gguf)");
  cmd->add_flag("--trust-remote-code", flags->trust_remote_code, "not supported: mlxrt runs no code from a model repository");
  cmd->add_flag("--quiet", flags->quiet, "no progress on stderr");
  cmd->callback([flags] {
    if (flags->export_gguf || !flags->gguf_path.empty())
      throw UsageError("--export-gguf: mlxrt does not write GGUF files; run mlx_lm.fuse --export-gguf for that");
    if (!flags->upload_repo.empty())
      throw UsageError("--upload-repo: mlxrt does not upload; after fusing, run `huggingface-cli upload " +
                       flags->upload_repo + " " + flags->options.save_path.string() + "`");
    if (flags->trust_remote_code)
      throw UsageError("--trust-remote-code: mlxrt runs no Python code from a model repository (leave the flag out)");
    auto options = flags->options;
    options.progress = !flags->quiet;
    if (const char* limit = std::getenv("MLXRT_CONVERT_SHARD_BYTES")) options.max_shard_bytes = std::stoull(limit);
    convert::fuse_adapter(options, std::cout);
  });
}

}  // namespace mlxrt::cli
