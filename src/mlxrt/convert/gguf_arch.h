#pragma once
/** GGUF architectures the converter knows: one table entry each. An entry names the HF
 * model_type and class, maps llama.cpp tensor names onto the HF / mlx-lm checkpoint names, and
 * says whether llama.cpp permuted the Q/K rows (it does for architectures whose HF RoPE is the
 * "rotate half" kind but which llama.cpp runs with interleaved RoPE). No MLX dependency. */
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/convert/gguf_file.h"

namespace mlxrt::convert {

struct TensorRename {
  const char* gguf;  // without ".weight"/".bias"; per-layer names start after "blk.N."
  const char* hf;    // per-layer names are put after "model.layers.N."
};

struct GgufArchitecture {
  const char* gguf_name;       // general.architecture
  const char* model_type;      // config.json model_type (the mlx-lm model file)
  const char* hf_class;        // config.json architectures[0]
  bool permuted_qk;            // llama.cpp's converter permuted the Q and K rows
  std::vector<TensorRename> global_tensors;
  std::vector<TensorRename> layer_tensors;
  const char* prefix = "";     // put before every checkpoint name (Qwen3.5's "language_model.")
};

/** The entry for `general.architecture`, or UnsupportedError listing the supported ones. */
const GgufArchitecture& find_architecture(const GgufFile& file);

/** Qwen3-Next and Qwen3.5 (dense or MoE): gated delta net layers, whose tensors llama.cpp
 * transforms (undone by gguf_gated_delta.h after conversion). */
bool is_gated_delta(const GgufArchitecture& arch);

/** The `general.architecture` names the converter reads, comma-separated, for messages and help. */
std::string supported_gguf_architectures();

/** Where a GGUF tensor goes in the checkpoint. */
struct TensorPlan {
  std::string hf_name;
  std::optional<uint64_t> qk_heads;  // set when the rows must be un-permuted, over this many heads
  bool as_row = false;               // a 1-D GGUF vector that the checkpoint holds as [1, n]
  bool minus_one = false;            // a Gemma norm weight, which llama.cpp stores plus one
  bool split_rows = false;           // one 1-D tensor per row, hf_name's "#" replaced by the row index
  bool as_conv = false;              // a plain [channels, kernel] depthwise conv weight, held as [channels, kernel, 1]
  // A float32 vector that llama.cpp's converter widened from the file's 16-bit type (its norms and
  // convolutions): written back as that type (general.file_type's BF16 or F16) when every value
  // is exact in it, else kept float32.
  bool narrow = false;
  // A norm weight that llama.cpp and mlx-lm's sanitize both store plus one: llama.cpp adds in
  // float32, mlx-lm in the checkpoint's 16-bit type. Written rounded to that type, as mlx-lm has it.
  bool narrow_rounds = false;
  // Tensors transformed together after conversion (gguf_gated_delta.h) share one shard: the layer.
  std::string keep_with;
  // A fused tensor split by rows (elements of a 1-D one) into these checkpoint tensors, in order:
  // (name, rows). Empty for a tensor kept whole under hf_name.
  std::vector<std::pair<std::string, uint64_t>> row_parts;
};

/** The checkpoint name and row handling of one tensor, or nullopt for tensors that carry nothing
 * the checkpoint needs. UnsupportedError for tensors the architecture does not know. */
std::optional<TensorPlan> plan_tensor(const GgufArchitecture& arch, const GgufFile& file,
                                      const GgufTensorInfo& tensor);

/** config.json for the model (without its quantization section), from the GGUF metadata and, for
 * phi3's LongRoPE factors, the float32 tensors at `data` (the start of the file's data section).
 * Values the file does not hold and that are taken from the published checkpoints of the family
 * (gemma3n's) are appended to `notes`, one line each. */
nlohmann::ordered_json build_model_config(const GgufArchitecture& arch, const GgufFile& file, const uint8_t* data,
                                          std::vector<std::string>* notes = nullptr);

/** The shortest decimal that reads back as the same float32 (1e-05 rather than
 * 9.999999747378752e-06), as a double: GGUF stores these hyper-parameters as float32. */
double shortest_float32(double value);

}  // namespace mlxrt::convert
