#pragma once
/** config.json (plus generation_config.json's eos ids) of a model directory. Per-family typed
 * arguments are read from `fields()` by each family file, as mlx-lm's ModelArgs.from_dict does:
 * unknown keys are ignored, missing required keys are errors naming the key and the file. */
#include <filesystem>
#include <string>
#include <vector>

#include "mlxrt/io/quantization.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::io {

class ModelConfig {
 public:
  /** Reads `dir`/config.json and merges generation_config.json's eos_token_id as mlx-lm does
   * (a present, non-empty value replaces config.json's). */
  static ModelConfig load(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const json& raw() const { return raw_; }
  JsonFields fields() const { return JsonFields(raw_, source_); }
  const std::string& source() const { return source_; }
  const std::string& model_type() const { return model_type_; }
  /** eos ids from config (after the generation_config merge); may be empty. */
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }
  const QuantizationMap& quantization() const { return quantization_; }

 private:
  std::filesystem::path dir_;
  std::string source_;
  json raw_;
  std::string model_type_;
  std::vector<int32_t> eos_token_ids_;
  QuantizationMap quantization_;
};

}  // namespace mlxrt::io
