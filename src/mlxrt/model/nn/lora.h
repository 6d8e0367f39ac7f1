#pragma once
/** Adapters as mlx-lm trains them (mlx_lm.lora): a directory with adapter_config.json and
 * adapters.safetensors. LoRA and DoRA adapters wrap the model's Linear / Embedding layers unfused,
 * as mlx-lm's load(adapter_path=...) does (tuner/utils.py load_adapters, linear_to_lora_layers);
 * a "full" fine-tune replaces the base model's tensors. */
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/io/weights.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** The low-rank delta of one adapted layer (LoRALinear / DoRALinear / LoRAEmbedding /
 * DoRAEmbedding's parameters). For a Linear: a [in, r], b [r, out], m [out]; for an Embedding:
 * a [num_embeddings, r], b [r, dims], m [num_embeddings]. */
struct LoraDelta {
  mx::array a;
  mx::array b;
  std::optional<mx::array> m;  // DoRA's magnitude
  double scale = 20.0;
  bool dora = false;
};

/** adapter_config.json as mlx_lm.lora writes it (the fields load_adapters reads). */
struct AdapterConfig {
  std::string fine_tune_type = "lora";  // lora, dora or full
  int num_layers = 16;
  int rank = 8;
  double scale = 20.0;
  double dropout = 0.0;
  std::optional<std::set<std::string>> keys;  // module paths relative to a layer (or to the model)
};

class Adapter {
 public:
  /** Reads `dir`/adapter_config.json (checked field by field) and the headers of
   * `dir`/adapters.safetensors (tensors stay lazy). ConfigError / WeightsError naming the file. */
  static std::shared_ptr<Adapter> load(const std::filesystem::path& dir);

  const AdapterConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }
  const std::filesystem::path& weights_file() const { return file_; }
  bool full() const { return config_.fine_tune_type == "full"; }

  /** len(model.layers): the adapted layers are the last num_layers of these. */
  void set_layer_count(int layers) { layers_ = layers; }

  /** The delta of module `path` when the adapter adapts it (its layer is among the last
   * num_layers and its name among the keys, or its full path is a key) and the file holds its
   * tensors. `rows` x `cols` is the layer's shape as LoRA sees it (in x out for a Linear,
   * num_embeddings x dims for an Embedding); `m_size` the length of DoRA's magnitude. A tensor of
   * another shape is recorded as a problem (finish() throws). `dora_magnitude` computes DoRA's
   * magnitude from the base weight when the file lacks it (DoRALinear.set_linear). */
  std::shared_ptr<const LoraDelta> take(const std::string& path, int rows, int cols, int m_size,
                                        const std::function<mx::array()>& dora_magnitude = {});

  /** The delta of the switch layer `path` (LoRASwitchLinear's: lora_a [num_experts, r, in],
   * lora_b [num_experts, out, r]) when the adapter adapts it, as take() decides. A DoRA adapter
   * holding tensors for it is refused, as mlx-lm refuses DoRA on switch layers. */
  std::shared_ptr<const LoraDelta> take_switch(const std::string& path, int num_experts, int input_dims,
                                               int output_dims);


  /** "full" fine-tunes: the tensors that replace the base model's. */
  const io::WeightMap& tensors() const { return tensors_; }

  /** Every tensor taken so far (to evaluate with the model's). */
  const std::vector<mx::array>& taken() const { return taken_; }

  /** Throws WeightsError naming the file and each tensor that matched no adapted layer or has
   * another shape than the layer needs. */
  void finish() const;

  /** How many layers the adapter wraps: mlx-lm constructs each wrapper with a base layer and
   * lora_a drawn at random (two keys from the global PRNG per wrapped layer). */
  int wrapped_layers() const { return wrapped_; }

 private:
  bool selects(const std::string& path) const;

  std::filesystem::path dir_, file_;
  AdapterConfig config_;
  io::WeightMap tensors_;
  int layers_ = -1;
  int wrapped_ = 0;
  std::vector<std::string> misshaped_;
  std::vector<mx::array> taken_;
};

/** The adapter tensor names of a module: path.lora_a, path.lora_b, path.m. */
bool is_adapter_leaf(const std::string& name);

/** LoRALinear / DoRALinear's __call__ around `base` (the wrapped layer's own output, computed by
 * `linear` on x). `weight` is the layer's (dequantized) weight, needed by DoRA; `bias` its bias,
 * which DoRA adds after the rescaling. */
mx::array lora_linear(const LoraDelta& d, const mx::array& x, const std::function<mx::array(const mx::array&)>& linear,
                      const std::function<mx::array()>& weight, const std::optional<mx::array>& bias);

/** LoRASwitchLinear's __call__: `y` is the wrapped switch layer's output for x and `indices`; the
 * low-rank delta goes through the same experts (gather_mm over lora_a, then lora_b). */
mx::array lora_switch(const LoraDelta& d, const mx::array& x, const mx::array& y, const mx::array& indices,
                      bool sorted_indices);

/** LoRAEmbedding / DoRAEmbedding __call__: `rows` is the base embedding's output for `ids`. */
mx::array lora_embedding(const LoraDelta& d, const mx::array& ids, const mx::array& rows);

/** LoRAEmbedding / DoRAEmbedding as_linear: `y` is the base embedding's as_linear(x); `weight`
 * the base (unquantized) embedding weight, needed by DoRA. */
mx::array lora_embedding_as_linear(const LoraDelta& d, const mx::array& x, const mx::array& y,
                                   const std::function<mx::array()>& weight);

/** mlx-lm's fuse() of an adapted layer (tuner/lora.py, tuner/dora.py): the weight of the plain
 * layer that replaces the wrapper. `weight` is the base layer's float weight (dequantized when
 * the layer is quantized; re-quantizing the result is the caller's). For a Linear [out, in]: W +
 * ((scale B^T) A^T).astype(W.dtype), and for DoRA that rescaled per row by m / |row|. */
mx::array fused_linear_weight(const LoraDelta& d, const mx::array& weight);
/** The same for an Embedding [num_embeddings, dims]: W + ((scale A) B).astype(W.dtype) (DoRA: rescaled). */
mx::array fused_embedding_weight(const LoraDelta& d, const mx::array& weight);
/** The same for a switch layer [experts, out, in]: W + ((scale B) A).astype(W.dtype). */
mx::array fused_switch_weight(const LoraDelta& d, const mx::array& weight);

}  // namespace mlxrt::model::nn
