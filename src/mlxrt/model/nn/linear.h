#pragma once
/** mlx.nn.Linear / QuantizedLinear and Embedding / QuantizedEmbedding, as mlx-lm uses them. */
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mlx/array.h>
#include <mlx/distributed/distributed.h>

#include "mlxrt/io/quantization.h"
#include "mlxrt/kernels/cpu/l3_block.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cuda/fused_qmv.h"
#include "mlxrt/model/nn/adapter_rows.h"
#include "mlxrt/model/nn/lora.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** The packed form of a quantized weight (mx.quantize's outputs). */
struct Quantized {
  mx::array scales;
  std::optional<mx::array> biases;  // affine mode only
  io::QuantSpec spec;
  /** Our CPU kernels, where the binder gave them (null: MLX's). */
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu;
  /** The weights packed for the L3 kernels (--fidelity l3), where they apply, and the matrix's
   * output and input dimensions (the layer may then drop its unpacked weight). */
  std::optional<mx::array> l3;
  int l3_n = 0, l3_k = 0;
  /** --fidelity l3 on a CUDA GPU: the few-row products go to kernels::cuda::affine_qmv. */
  bool gpu_l3 = false;
  /** mx::quantized_matmul(x, weight, scales, biases, transpose = true, ...) of this layer; at L3
   * the L3 kernel's product where it applies (the CPU's, or CUDA's matrix-vector kernel). */
  mx::array matmul(const mx::array& x, const mx::array& weight) const;
  /** Packs the weights for the L3 kernels when the binder's kernels run them (noted as derived). */
  void pack_l3(WeightBinder& w, const mx::array& weight);
};

class Linear {
 public:
  /** Binds `path`.weight (and .bias, .scales, .biases) for a layer of `in_dims` -> `out_dims`,
   * quantized when the checkpoint's quantization map says so. With an adapter on the binder that
   * adapts `path`, the layer is its LoRALinear / DoRALinear (the base layer plus the delta). */
  static Linear load(WeightBinder& w, const std::string& path, int in_dims, int out_dims, bool bias);
  /** The same layer sharded over the binder's tensor group as mlx's shard_linear makes it
   * (AllToShardedLinear / ShardedToAllLinear or their quantized twins): this rank's rows or columns
   * of weight, scales and biases. `shard` none is load() above. */
  static Linear load(WeightBinder& w, const std::string& path, int in_dims, int out_dims, bool bias, Shard shard);
  /** The layer as mlx's shard_inplace leaves it: this rank's part of every parameter as above, the
   * sharded axis first cut at `segments` (each segment split across the group; empty: one), but
   * still a Linear / QuantizedLinear: nothing is drawn from the PRNG and no all_sum is added (the
   * module that owns the layer sums where its mlx-lm code does). */
  static Linear load_sharded_inplace(WeightBinder& w, const std::string& path, int in_dims, int out_dims, bool bias,
                                     Shard shard, const std::vector<int>& segments = {});

  mx::array operator()(const mx::array& x) const;

  /** Whether this layer's forward is MLX's matmul (or addmm) of x with the weight and nothing
   * around it: MLX then flattens a [B, L, D] input to [B * L, D] and the product back, two graph
   * nodes per call. Layers that share an input and all do this can take it flattened once, the
   * same product of the same rows (a batched decode step on a GPU is bound by its node count). A
   * quantized layer is not such a layer: MLX's quantized matmul keeps the batch axes, and which
   * kernel it picks depends on them. Nor is one that our CPU kernels may run (one node whatever
   * the input's rank). */
  bool flattens_rows() const {
    return !q_ && !lora_ && !slots_ && !sum_over_ && !cpu_ && !gpu_l3_ && rows_per_call_ == 0;
  }

  /** The layer's L3-packed matrix where its forward is that product alone (no bias, adapter,
   * sharding or row-exact split around it), for the fused L3 blocks; nullopt elsewhere. */
  std::optional<kernels::cpu::L3Matrix> l3_matrix() const;
  /** At --fidelity l3 on a CUDA GPU, the layer's matrix (affine-quantized, or dense with
   * MLXRT_CUDA_L3_DENSE=1) where its forward is that product alone (as l3_matrix), for the fused
   * CUDA kernels; nullopt elsewhere. */
  std::optional<kernels::cuda::QmvMatrix> cuda_l3_matrix() const;
  /** The same for the one-kernel decoder layer, which also takes a dense layer without the opt-in
   * (it decides itself which dense layers it runs: decoder_layer_wanted). */
  std::optional<kernels::cuda::QmvMatrix> cuda_layer_matrix() const;

 private:
  Linear(mx::array weight, std::optional<mx::array> bias, std::optional<Quantized> q)
      : weight_(std::move(weight)), bias_(std::move(bias)), q_(std::move(q)) {}
  mx::array forward(const mx::array& x) const;
  mx::array base(const mx::array& x) const;
  mx::array dequantized_weight() const;
  /** This rank's rows (all_to_sharded) or columns (sharded_to_all) of every parameter. */
  void keep_shard(WeightBinder& w, const std::string& path, Shard shard, const std::vector<int>& segments);
  /** A dense weight's transpose, made once its weight is final (see kernels::cpu::matmul_transposed),
   * and handed to `w` to evaluate with the weights: a lazy transpose would carry the loading
   * thread's stream into the first forward, which may run on another thread (the server's), where
   * MLX refuses it ("There is no Stream(cpu, 0) in current thread"). */
  void keep_transposed(WeightBinder& w);
  mx::array weight_;
  std::optional<mx::array> weight_t_;  // mx::transpose(weight_) of a dense layer
  std::optional<mx::array> bias_;
  std::optional<Quantized> q_;
  std::shared_ptr<const LoraDelta> lora_;  // an adapter's delta (mlx-lm's unfused LoRA layers)
  std::shared_ptr<const SlotDeltas> slots_;  // a mixed-adapter model's deltas, by slot
  /** ShardedToAllLinear: the group the partial products are summed over (before the bias). */
  std::optional<mx::distributed::Group> sum_over_;
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_;  // our CPU kernels (null: MLX's)
  /** Row-exact loads: the most rows one call of this layer's matmul may take and still give each
   * row a one-row call's bytes (row_invariant_rows; 0: any number, the layer runs as it is). */
  int rows_per_call_ = 0;
  /** --fidelity l3 on a CUDA GPU with MLXRT_CUDA_L3_DENSE=1, a dense layer: few-row products go to
   * kernels::cuda::dense_mv (a quantized layer's flag is Quantized::gpu_l3). */
  bool gpu_l3_ = false;
  /** --fidelity l3 on a CUDA GPU, a dense layer: the one-kernel decoder layer may take it. */
  bool gpu_l3_layer_ = false;
};

/** How many rows one matmul call of a layer with this weight (quantized as `q`, or dense) may take
 * while giving each row the bytes that row gets alone, as a decoding step's [1, 1, D] input, on the
 * device models run on now: 0 for any number, else the most rows per call (docs/exact-mode.md has
 * the rules and MLX's source lines). On the CPU, MLX's affine quantized matmul and its bfloat16 /
 * float16 matmul (simd_gemm), and our kernels that reproduce their bytes, compute every output
 * element by the same loop whatever M is (0); float32 goes to the BLAS, whose sgemm may take a gemv
 * path for one row (1). On CUDA an affine quantized matmul of fewer than 8 rows runs the qmv kernel,
 * one warp per output whatever M is, as one row does (7), except where MLX's sm_90 quantized GEMM
 * takes one-group rows (group_size >= in_dims: 1); a dense matmul of one row is a gemv and of more
 * a cuBLASLt GEMM (1). Checked end to end by tests/generate/test_spec_exact.py. */
int row_invariant_rows(const mx::array& weight, const std::optional<Quantized>& q);

/** `f` applied to the rows of `x` (all axes but the last) in calls of at most `per_call` rows, each
 * call shaped [1, m, D] (one row: a decoding step's [1, 1, D]), the results put back in `x`'s shape;
 * nullopt when one call would take them all (then `f(x)` is already that). */
std::optional<mx::array> each_row(const mx::array& x, const std::function<mx::array(const mx::array&)>& f,
                                  int per_call = 1);

class Embedding {
 public:
  static Embedding load(WeightBinder& w, const std::string& path, int num_embeddings, int dims);

  /** Rows for token ids (`weight[x]`). */
  mx::array operator()(const mx::array& ids) const;
  /** The tied output head: `x @ weight.T` (or its quantized matmul). */
  mx::array as_linear(const mx::array& x) const;

 private:
  mx::array base(const mx::array& ids) const;
  mx::array as_linear_rows(const mx::array& x) const;
  mx::array base_as_linear(const mx::array& x) const;
  Embedding(mx::array weight, std::optional<Quantized> q) : weight_(std::move(weight)), q_(std::move(q)) {
    if (!q_) weight_t_ = mx::transpose(weight_);
  }
  mx::array weight_;
  std::optional<mx::array> weight_t_;  // mx::transpose(weight_) of a dense table, for as_linear
  std::optional<Quantized> q_;
  std::shared_ptr<const LoraDelta> lora_;  // an adapter's delta (LoRAEmbedding / DoRAEmbedding)
  std::shared_ptr<const SlotDeltas> slots_;  // a mixed-adapter model's deltas, by slot
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_;  // our CPU kernels (null: MLX's)
  int rows_per_call_ = 0;  // as Linear's, for as_linear
  bool gpu_l3_ = false;    // as Linear's: a dense tied head's few-row products by dense_mv
};

/** The deltas each slot's adapter has for module `path` (WeightBinder::adapter_slots); null when
 * no slot adapts it. `take` is Adapter::take or take_switch, bound to the module's shape. */
std::shared_ptr<const SlotDeltas> take_slot_deltas(
    const WeightBinder& w, const std::function<std::shared_ptr<const LoraDelta>(Adapter&)>& take);

/** Binds the quantized tensors of `path` when the map quantizes it. Shared by Linear/Embedding. */
std::optional<Quantized> load_quantized(WeightBinder& w, const std::string& path, int in_dims,
                                        int out_dims, mx::array& weight);

}  // namespace mlxrt::model::nn
