// `mlxrt convert --gguf FILE.gguf --out DIR`: a GGUF model (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, F16, BF16, F32
// tensors) converted losslessly into an MLX checkpoint directory that mlxrt and mlx-lm load.
#include <cstdio>
#include <string>

#include "mlxrt/cli/verbs.h"
#include "mlxrt/convert/gguf_convert.h"

namespace mlxrt::cli {

void register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert",
      "Convert a GGUF model (llama, qwen2, qwen3 architectures; Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K/F16/BF16/F32 tensors) "
      "losslessly into an MLX checkpoint directory (config.json, model.safetensors, tokenizer.json)");
  struct Flags {
    std::string gguf, out;
    bool quiet = false;
    bool tokenizer_only = false;
  };
  auto flags = std::make_shared<Flags>();
  cmd->add_option("--gguf", flags->gguf, "GGUF model file to convert")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", flags->out, "output directory (must not exist, or be empty)")->required();
  cmd->add_flag("--quiet", flags->quiet, "no progress on stderr");
  cmd->add_flag("--tokenizer-only", flags->tokenizer_only,
                "write only tokenizer.json, tokenizer_config.json and generation_config.json");
  cmd->callback([flags] {
    convert::GgufConvertOptions options;
    options.gguf = flags->gguf;
    options.out = flags->out;
    options.progress = !flags->quiet;
    options.tokenizer_only = flags->tokenizer_only;
    auto summary = convert::convert_gguf(options);
    if (options.tokenizer_only) {
      std::printf("wrote %s: tokenizer files\n", flags->out.c_str());
      return;
    }
    std::printf("wrote %s: model_type %s, %llu arrays, %.1f MB in %d safetensors file%s, tokenizer files\n",
                flags->out.c_str(), summary.model_type.c_str(), static_cast<unsigned long long>(summary.tensors),
                summary.bytes / 1e6, summary.shards, summary.shards == 1 ? "" : "s");
  });
}

}  // namespace mlxrt::cli
