// `mlxrt convert`: mlx_lm.convert's flags (--hf-path DIR|org/name, --mlx-path, -q, --q-bits,
// --q-group-size, --q-mode, --quant-predicate, --dtype, -d) on a checkpoint of a family mlxrt runs,
// writing what mlx_lm.convert writes; and `--gguf FILE --out DIR`, a GGUF model of an architecture
// and tensor types gguf_arch.h lists (supported_gguf_architectures, supported_gguf_types) converted
// losslessly.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "mlxrt/cli/verbs.h"
#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/convert/gguf_blocks.h"
#include "mlxrt/convert/gguf_convert.h"
#include "mlxrt/convert/hf_convert.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace {

struct Flags {
  std::string gguf, out, hf_path, mlx_path = "mlx_model", q_mode = "affine", quant_predicate, dtype, upload_repo;
  int q_group_size = 0, q_bits = 0;
  bool quantize = false, dequantize = false, trust_remote_code = false;
  bool quiet = false;
  bool tokenizer_only = false;
};

void run_gguf(const Flags& flags, const CLI::App& cmd) {
  convert::GgufConvertOptions options;
  options.gguf = flags.gguf;
  if (flags.out.empty() && cmd.count("--mlx-path") == 0)
    throw UsageError("convert --gguf: give the output directory with --out DIR");
  options.out = flags.out.empty() ? flags.mlx_path : flags.out;
  options.progress = !flags.quiet;
  options.tokenizer_only = flags.tokenizer_only;
  for (const char* f : {"-q", "--q-bits", "--q-group-size", "--quant-predicate", "--dtype", "-d"})
    if (cmd.count(f)) throw UsageError(std::string("convert --gguf: ") + f + " applies to --hf-path conversions (a GGUF converts losslessly)");
  auto summary = convert::convert_gguf(options);
  if (options.tokenizer_only) {
    std::printf("wrote %s: tokenizer files\n", options.out.string().c_str());
    return;
  }
  std::printf("wrote %s: model_type %s, %llu arrays, %.1f MB in %d safetensors file%s, tokenizer files\n",
              options.out.string().c_str(), summary.model_type.c_str(), static_cast<unsigned long long>(summary.tensors),
              summary.bytes / 1e6, summary.shards, summary.shards == 1 ? "" : "s");
}

void run_hf(const Flags& flags, const CLI::App& cmd) {
  if (flags.trust_remote_code)
    throw UsageError("--trust-remote-code: mlxrt runs no Python code from a model repository; it converts the "
                     "families it runs natively (leave the flag out), and a model that needs its own code is refused");
  if (!flags.upload_repo.empty())
    throw UsageError("--upload-repo: mlxrt does not upload; after converting, run "
                     "`huggingface-cli upload " + flags.upload_repo + " " + flags.mlx_path + "`");
  if (!flags.out.empty()) throw UsageError("convert --hf-path: the output directory is --mlx-path (default mlx_model)");
  if (flags.tokenizer_only) throw UsageError("--tokenizer-only applies to --gguf conversions");
  convert::HfConvertOptions options;
  options.hf_path = flags.hf_path;
  options.mlx_path = flags.mlx_path;
  options.quantize = flags.quantize;
  options.dequantize = flags.dequantize;
  options.progress = !flags.quiet;
  // The shard limit (mlx-lm's 5 GiB) lowered by tests that check where shards split.
  if (const char* limit = std::getenv("MLXRT_CONVERT_SHARD_BYTES")) options.max_shard_bytes = std::stoull(limit);
  if (cmd.count("--q-group-size")) options.quant.group_size = flags.q_group_size;
  if (cmd.count("--q-bits")) options.quant.bits = flags.q_bits;
  options.quant.mode = flags.q_mode;
  if (!flags.quant_predicate.empty()) options.quant.recipe = flags.quant_predicate;
  if (!flags.dtype.empty()) options.dtype = flags.dtype;
  if (!flags.quantize && (cmd.count("--q-group-size") || cmd.count("--q-bits") || !flags.quant_predicate.empty() ||
                          cmd.count("--q-mode")))
    std::fprintf(stderr, "[WARNING] --q-bits/--q-group-size/--q-mode/--quant-predicate have no effect without -q\n");
  auto summary = convert::convert_hf(options, std::cout);
  if (summary.tokenizer_files == 0)
    std::fprintf(stderr, "[WARNING] %s holds no tokenizer files; copy them into %s before running it\n",
                 flags.hf_path.c_str(), flags.mlx_path.c_str());
}

}  // namespace

void register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert",
      "Convert a Hugging Face checkpoint into an MLX one as mlx_lm.convert does (--hf-path, optionally quantized "
      "with -q), or a GGUF model (architectures " + convert::supported_gguf_architectures() + "; tensor types " +
          convert::supported_gguf_types() + ") losslessly into an MLX checkpoint directory (--gguf)");
  auto flags = std::make_shared<Flags>();
  cmd->add_option("--hf-path,--model", flags->hf_path,
                  "model to convert: a local directory or a Hugging Face repo id in the local cache (org/name[@revision])");
  cmd->add_option("--mlx-path", flags->mlx_path, "path to save the MLX model (default mlx_model; must not exist)");
  cmd->add_flag("-q,--quantize", flags->quantize, "generate a quantized model");
  cmd->add_option("--q-group-size", flags->q_group_size, "group size for quantization (default: the mode's, 64 for affine)");
  cmd->add_option("--q-bits", flags->q_bits, "bits per weight for quantization (default: the mode's, 4 for affine)");
  cmd->add_option("--q-mode", flags->q_mode, "the quantization mode")
      ->check(CLI::IsMember({"affine", "mxfp4", "nvfp4", "mxfp8"}));
  cmd->add_option("--quant-predicate", flags->quant_predicate, "mixed-bit quantization recipe")
      ->check(CLI::IsMember(convert::quant_recipes()));
  cmd->add_option("--dtype", flags->dtype,
                  "type to save the non-quantized parameters (default: config.json's torch_dtype, else as stored)")
      ->check(CLI::IsMember({"float16", "bfloat16", "float32"}));
  cmd->add_option("--upload-repo", flags->upload_repo, "not supported: mlxrt does not upload (use huggingface-cli upload)");
  cmd->add_flag("-d,--dequantize", flags->dequantize, "dequantize a quantized model");
  cmd->add_flag("--trust-remote-code", flags->trust_remote_code, "not supported: mlxrt runs no code from a model repository");
  cmd->add_option("--gguf", flags->gguf, "GGUF model file to convert (instead of --hf-path)")->check(CLI::ExistingFile);
  cmd->add_option("--out", flags->out, "output directory of a --gguf conversion (must not exist, or be empty)");
  cmd->add_flag("--quiet", flags->quiet, "no progress on stderr");
  cmd->add_flag("--tokenizer-only", flags->tokenizer_only,
                "with --gguf: write only tokenizer.json, tokenizer_config.json and generation_config.json");
  cmd->callback([flags, cmd] {
    if (flags->gguf.empty() == flags->hf_path.empty())
      throw UsageError("convert: give the model to convert with --hf-path DIR (or org/name), or --gguf FILE");
    if (!flags->gguf.empty()) return run_gguf(*flags, *cmd);
    run_hf(*flags, *cmd);
  });
}

}  // namespace mlxrt::cli
