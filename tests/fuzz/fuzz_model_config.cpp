// Arbitrary bytes as a model folder's config.json (and, after a "\n#gen#\n" line, its
// generation_config.json): ModelConfig::load, the quantization section, the config fingerprint and
// the typed reads the families' ModelArgs make must succeed or throw mlxrt::Error; never crash,
// never hit undefined behaviour (UBSan), never accept an out-of-range value.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "mlxrt/io/model_config.h"
#include "mlxrt/model/fingerprint.h"
#include "mlxrt/util/errors.h"

namespace fs = std::filesystem;

namespace {

const fs::path& folder() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("mlxrt-fuzz-config-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

template <typename T>
void read(const mlxrt::JsonFields& f, const char* key) {
  try {
    if (auto v = f.optional<T>(key)) {
      if constexpr (std::is_floating_point_v<T>)
        if (!std::isfinite(*v)) __builtin_trap();  // JsonFields promised finite numbers
    }
  } catch (const mlxrt::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  const fs::path& dir = folder();
  std::error_code ec;
  if (auto p = input.find("\n#gen#\n"); p != std::string::npos) {
    write(dir / "generation_config.json", input.substr(p + 7));
    input.resize(p);
  } else {
    fs::remove(dir / "generation_config.json", ec);
  }
  write(dir / "config.json", input);
  try {
    auto config = mlxrt::io::ModelConfig::load(dir);
    auto f = config.fields();
    for (const char* key : {"hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
                            "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                            "sliding_window", "num_experts", "num_experts_per_tok", "moe_intermediate_size"})
      read<int>(f, key);
    for (const char* key : {"rms_norm_eps", "rope_theta", "partial_rotary_factor", "layer_norm_epsilon"})
      read<double>(f, key);
    for (const char* key : {"tie_word_embeddings", "attention_bias", "mlp_bias"}) read<bool>(f, key);
    read<std::string>(f, "hidden_act");
    for (int32_t id : config.eos_token_ids())
      if (id < 0) __builtin_trap();  // token ids were promised to be in 0..2^31-1
    const auto& q = config.quantization();
    for (int in_dims : {64, 128, 4096})
      try {
        (void)q.for_module("model.layers.0.mlp.up_proj", in_dims, std::nullopt);
        (void)q.for_module("lm_head", in_dims, std::nullopt);
      } catch (const mlxrt::Error&) {
      }
    (void)mlxrt::model::config_fingerprint(config.raw());
  } catch (const mlxrt::Error&) {
  }
  return 0;
}
