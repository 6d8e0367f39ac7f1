#pragma once
/** `mlxrt fuse`: mlx_lm.fuse in C++. An adapter trained by mlx_lm.lora (LoRA or DoRA on Linear,
 * Embedding and switch layers, or a full fine-tune) fused into the base model's weights, the
 * quantized layers quantized again as they were (or everything dequantized), written as mlx-lm
 * writes it: the same bytes as mlx_lm.fuse for the same model and adapter. */
#include <filesystem>
#include <iosfwd>
#include <string>

namespace mlxrt::convert {

struct FuseOptions {
  std::string model = "mlx_model";        // a local directory or an HF cache id
  std::filesystem::path save_path = "fused_model";
  std::string adapter_path = "adapters";  // a local directory or an HF cache id
  bool dequantize = false;
  bool progress = true;
  uint64_t max_shard_bytes = 5ull << 30;
};

struct FuseSummary {
  int fused_modules = 0;
  int shards = 0;
};

/** Fuses, printing mlx_lm.fuse's lines to `info`. Nothing is left at save_path on error. */
FuseSummary fuse_adapter(const FuseOptions& options, std::ostream& info);

}  // namespace mlxrt::convert
