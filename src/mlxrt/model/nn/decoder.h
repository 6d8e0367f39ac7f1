#pragma once
/** One decoder skeleton for the dense families: the Attention / MLP / TransformerBlock / Model that
 * mlx_lm/models/llama.py, qwen2.py, qwen3.py, phi3.py and their kin repeat, driven by per-family
 * options. A family file reads its ModelArgs, fills these options (what differs from llama), and
 * subclasses Decoder only where its Model does something of its own (an embedding scale, a head
 * that divides its input). Member and weight names follow mlx-lm, so a family file reads beside
 * its mlx-lm twin. */
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/cache/cache.h"
#include "mlxrt/kernels/cuda/decoder_layer.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/rope.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** mlx.nn.RMSNorm or mlx.nn.LayerNorm (with or without its bias), as the family declares it. */
class Norm {
 public:
  enum class Kind { rms, layer, layer_no_bias };
  static Norm load(WeightBinder& w, const std::string& path, int dims, float eps, Kind kind = Kind::rms);
  mx::array operator()(const mx::array& x) const;
  /** An RMSNorm's weight and eps (nullopt for the other kinds). */
  std::optional<std::pair<mx::array, float>> rms() const {
    if (kind_ != Kind::rms) return std::nullopt;
    return std::pair(weight_, eps_);
  }

 private:
  Norm(Kind kind, mx::array weight, std::optional<mx::array> bias, float eps)
      : kind_(kind), weight_(std::move(weight)), bias_(std::move(bias)), eps_(eps) {}
  Kind kind_;
  mx::array weight_;
  std::optional<mx::array> bias_;
  float eps_;
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_;  // the fused L3 RMSNorm where it runs
};

/** Where the q/k norms sit: none; per_head: over head_dim after splitting the heads (qwen3);
 * projection: over the whole projection before splitting (olmo2); custom: the family's own
 * functions on the split heads [B, L, H, D] (stablelm's per-head LayerNorms). */
enum class QkNorm { none, per_head, projection, custom };

/** The dtype the attention itself runs in, where a family upcasts around it:
 * queries_f32: sdpa(q.astype(float32), k, v).astype(v.dtype) (phi);
 * queries_keys_f32: q and k as float32, the output as v.dtype (stablelm);
 * float16_queries_f32: float16 queries as float32, the output back in the queries' dtype (cohere2). */
enum class SdpaCast { none, queries_f32, queries_keys_f32, float16_queries_f32 };

struct AttentionOptions {
  int hidden_size = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0;            // the softmax scale (usually head_dim ** -0.5, see default_scale)
  bool qkv_bias = false;      // biases on q_proj, k_proj, v_proj
  bool o_bias = false;
  bool fused_qkv = false;     // one qkv_proj, split at the query and key widths (phi3)
  QkNorm qk_norm = QkNorm::none;
  /** Per-head q/k norms after RoPE, before the cache update (hunyuan_v1_dense), not before RoPE. */
  bool qk_norm_after_rope = false;
  Norm::Kind qk_norm_kind = Norm::Kind::rms;
  float qk_norm_eps = 1e-6f;
  std::function<mx::array(const mx::array&)> custom_q_norm, custom_k_norm;  // QkNorm::custom
  SdpaCast sdpa_cast = SdpaCast::none;
  std::optional<Rope> rope;   // none: a NoPE layer (keys and queries enter unrotated)
  /** A family's own step on the rotated queries before the attention (ministral3's position-
   * dependent scale), given the cache offset the new positions start at. */
  std::function<mx::array(const mx::array& queries, int offset)> scale_queries;
  std::string q_proj = "q_proj", k_proj = "k_proj", v_proj = "v_proj", o_proj = "o_proj";
  std::string qkv_proj = "qkv_proj", q_norm = "q_norm", k_norm = "k_norm";
  /** Tensor parallel over the binder's group, as llama.py's shard(): q/k/v all-to-sharded, o_proj
   * sharded-to-all, this rank running n_heads / N query and n_kv_heads / N key/value heads. */
  bool sharded = false;
};

/** head_dim ** -0.5 computed as Python computes it (in double), then as the float32 MLX uses. */
float default_scale(int head_dim);

class Attention {
 public:
  Attention(const AttentionOptions& options, WeightBinder& w, const std::string& path);

  mx::array operator()(const mx::array& x, const AttentionMask& mask, cache::Cache* cache) const;

  /** The pieces of operator(), for a family whose attention adds a step of its own. */
  struct Heads {
    mx::array queries, keys, values;  // [B, H, L, D]
  };
  Heads project(const mx::array& x) const;
  /** RoPE (unless NoPE) at the cache's offset, then the cache update; `queries` rotated in place. */
  cache::CachedKV position_and_cache(mx::array& queries, const mx::array& keys, const mx::array& values,
                                     cache::Cache* cache) const;
  /** The attention over `kv`, heads merged, then o_proj. */
  mx::array attend(const mx::array& queries, const cache::CachedKV& kv, const AttentionMask& mask) const;

  /** At L3 on the CPU: x + this attention(rms_norm(x)) as two fused nodes around the cache update,
   * where this is llama's attention (separate L3-packed q/k/v/o, RoPE, no q/k norms) and `norm` an
   * RMSNorm; on a CUDA GPU the norm and projections fused as cuda_l3_residual_block says; nullopt
   * elsewhere. */
  std::optional<mx::array> l3_residual_block(const mx::array& x, const Norm& norm, const AttentionMask& mask,
                                             cache::Cache* cache) const;

  int n_heads() const { return o_.n_heads; }
  int n_kv_heads() const { return o_.n_kv_heads; }
  int head_dim() const { return o_.head_dim; }

  /** At --fidelity l3 on a CUDA GPU: this attention as the one-kernel decoder layer takes it
   * (kernels/cuda/decoder_layer.h): llama's (separate q/k/v/o without biases, per-head RMS q/k norms
   * before RoPE or none, one fast RoPE, no family step on the queries, not sharded); nullopt
   * otherwise. */
  std::optional<kernels::cuda::DecoderLayerAttention> cuda_layer_attention() const;

 private:
  mx::array sdpa(const mx::array& queries, const cache::CachedKV& kv, const AttentionMask& mask) const;
  /** project()'s heads from the projections: the q/k norms and the split into heads. */
  Heads split_projected(mx::array queries, mx::array keys, const mx::array& values, int B, int L) const;
  /** l3_residual_block at --fidelity l3 on a CUDA GPU: the RMSNorm and the q/k/v projections in one
   * node, o_proj and the residual add in another (kernels/cuda/fused_qmv.h), the rest as
   * operator() runs it; nullopt where those kernels do not apply. */
  std::optional<mx::array> cuda_l3_residual_block(const mx::array& x, const Norm& norm, const AttentionMask& mask,
                                                  cache::Cache* cache) const;
  /** In cuda_l3_residual_block: the q/k norms (per head or none) and RoPE of the projections q, k
   * ([B, L, heads * D]) in one node (kernels/cuda/qk_rope.h), then the cache update; the rotated
   * queries and what the cache gives back. nullopt where that kernel does not apply. */
  std::optional<std::pair<mx::array, cache::CachedKV>> cuda_l3_position_and_cache(const mx::array& q,
                                                                                  const mx::array& k,
                                                                                  const mx::array& v, int B, int L,
                                                                                  cache::Cache* cache) const;
  /** The CUDA kernels' q/k norms: both per-head RMSNorms, or neither (no q/k norms); nullopt for
   * other kinds. */
  std::optional<std::pair<std::optional<kernels::cuda::RmsNormIn>, std::optional<kernels::cuda::RmsNormIn>>>
  cuda_qk_norms() const;
  AttentionOptions o_;
  bool gpu_l3_ = false;  // --fidelity l3 on a CUDA GPU: the fused CUDA kernels where they apply
  bool per_query_row_ = false;  // row-exact loads: each query attends alone (attend_each_query)
  std::optional<Linear> q_proj_, k_proj_, v_proj_, qkv_proj_;
  Linear o_proj_;
  std::optional<Norm> q_norm_, k_norm_;
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_;  // the fused L3 attention where it runs
};

struct MlpOptions {
  enum class Kind {
    swiglu,        // down(swiglu(gate(x), up(x))), swiglu compiled as mlx-lm's activations.swiglu
    fused_swiglu,  // one gate_up_proj split in halves, gate first (phi3)
    plain,         // down(activation(up(x)))
    custom,        // the family's own feed-forward at the MLP's path (a sparse MoE block)
  };
  /** A feed-forward as a function of the normed hidden state. */
  using FeedForward = std::function<mx::array(const mx::array&)>;
  Kind kind = Kind::swiglu;
  int dims = 0, hidden = 0;
  bool bias = false;
  std::function<mx::array(const mx::array&)> activation;  // Kind::plain only
  /** Kind::custom: binds the family's block at `path` (the layer's MLP module) and returns it. */
  std::function<FeedForward(WeightBinder& w, const std::string& path)> custom;
  std::string gate_proj = "gate_proj", up_proj = "up_proj", down_proj = "down_proj";
  std::string gate_up_proj = "gate_up_proj";
  /** Tensor parallel (Kind::swiglu): gate/up all-to-sharded, down sharded-to-all, as llama.py's shard(). */
  bool sharded = false;
};

class Mlp {
 public:
  Mlp(const MlpOptions& options, WeightBinder& w, const std::string& path);
  mx::array operator()(const mx::array& x) const;
  /** At L3 on the CPU: h + this MLP(rms_norm(h)) as one fused node, where this is a plain SwiGLU
   * MLP of L3-packed layers and `norm` an RMSNorm; on a CUDA GPU, two nodes (the norm, gate, up and
   * SwiGLU; down and the add: kernels/cuda/fused_qmv.h); nullopt elsewhere. */
  std::optional<mx::array> l3_residual_block(const mx::array& h, const Norm& norm) const;
  /** At --fidelity l3 on a CUDA GPU: this MLP as the one-kernel decoder layer takes it (a plain
   * SwiGLU of gate, up and down without biases); nullopt otherwise. */
  std::optional<kernels::cuda::DecoderLayerMlp> cuda_layer_mlp() const;

 private:
  MlpOptions o_;
  std::optional<Linear> gate_proj_, up_proj_, gate_up_proj_, down_proj_;
  MlpOptions::FeedForward custom_;
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_;  // the fused L3 SwiGLU where it runs
  bool gpu_l3_ = false;  // --fidelity l3 on a CUDA GPU: the fused CUDA kernels where they apply
};

/** One transformer block. The norms are named by their weight path; an empty name is a norm the
 * family does not have. llama's layout is input_layernorm before the attention and
 * post_attention_layernorm before the MLP; olmo2-style post-norms apply to a sublayer's output
 * before its residual add. */
struct BlockOptions {
  AttentionOptions attention;
  MlpOptions mlp;
  int hidden_size = 0;
  float norm_eps = 1e-6f;
  Norm::Kind norm_kind = Norm::Kind::rms;
  std::string input_norm = "input_layernorm";
  std::string pre_mlp_norm = "post_attention_layernorm";
  std::string post_attention_norm;  // on the attention's output (olmo2, glm4)
  std::string post_mlp_norm;        // on the MLP's output
  /** Multiplies each sublayer's output before its residual add (minicpm's scale_depth, granite's
   * residual_multiplier): the factor as a Python float, so in the activations' dtype. */
  std::optional<double> residual_scale;
  /** sequential: llama's two residual adds. parallel: attention and MLP both read
   * input_norm(x), out = (attn + mlp) + x (phi, cohere2); parallel_residual_first:
   * out = (x + attn) + mlp (stablelm's use_parallel_residual). */
  enum class Residual { sequential, parallel, parallel_residual_first };
  Residual residual = Residual::sequential;
  bool use_sliding = false;  // attends over the model's sliding_window through a RotatingKVCache
  std::string self_attn = "self_attn", mlp_name = "mlp";
};

class Block {
 public:
  Block(const BlockOptions& options, WeightBinder& w, const std::string& path);
  mx::array operator()(const mx::array& x, const AttentionMask& mask, cache::Cache* cache) const;

  const Attention& self_attn() const { return self_attn_; }
  bool use_sliding() const { return use_sliding_; }

 private:
  /** At --fidelity l3 on a CUDA GPU (4-bit and small dense layers unless MLXRT_CUDA_L3_LAYER says
   * otherwise: kernels::cuda::decoder_layer_wanted): a decoding step of this layer (one
   * position, one sequence, a plain KVCache) as one kernel that also writes the cache in place
   * (kernels/cuda/decoder_layer.h); nullopt where the layer or the step does not fit it. */
  std::optional<mx::array> cuda_l3_layer(const mx::array& x, const AttentionMask& mask, cache::Cache* cache) const;
  /** The layer's weights as that kernel takes them, where it wants this layer; else nullopt. */
  std::optional<kernels::cuda::DecoderLayerWeights> cuda_layer_weights() const;

  Attention self_attn_;
  Mlp mlp_;
  std::optional<Norm> input_norm_, pre_mlp_norm_, post_attention_norm_, post_mlp_norm_;
  std::optional<double> residual_scale_;
  BlockOptions::Residual residual_;
  bool use_sliding_;
  /** cuda_layer_weights(), gathered once: a layer's weights do not change after it is built. */
  std::optional<kernels::cuda::DecoderLayerWeights> layer_weights_;
  /** What the layer keeps between its decoding steps on that kernel: the weights' addresses as the
   * kernel takes them, the grid, and the last launch's primitive with the cache capacity and x it
   * was made for, so a step makes the kernel's node without building the launch again (the host's
   * time is what bounds a small model's step). Shared: blocks are moved into their model's list,
   * and a mutex does not move. */
  struct CudaLayerState {
    std::mutex mutex;
    kernels::cuda::DecoderLayerWeightTable table;
    std::optional<kernels::cuda::DecoderLayerGrid> grid;
    std::shared_ptr<mx::Primitive> primitive;  // of the launch for:
    int capacity = -1;
    mx::Shape x_shape;
    mx::Dtype x_type = mx::float32;
    std::vector<mx::Shape> output_shapes;
    std::vector<mx::Dtype> output_types;
  };
  std::shared_ptr<CudaLayerState> cuda_state_;
};

/** llama.py's shard() over `group_size` ranks, on every block: the attention and, where it is the
 * dense SwiGLU, the MLP (a family shards its own custom MLP). ConfigError naming the config field
 * (num_attention_heads, num_key_value_heads, intermediate_size) that the world size does not divide. */
void shard_like_llama(std::vector<BlockOptions>& layers, int group_size, const std::string& source);

/** llama.py's block: q/k/v/o without biases, RoPE on every layer, swiglu MLP, RMSNorms before the
 * attention and the MLP. Families change what differs. */
BlockOptions llama_block(int hidden_size, int intermediate_size, int n_heads, int n_kv_heads, int head_dim,
                         float rms_norm_eps, std::optional<Rope> rope);

struct DecoderOptions {
  int vocab_size = 0, hidden_size = 0;
  float norm_eps = 1e-6f;
  Norm::Kind norm_kind = Norm::Kind::rms;
  bool tie_word_embeddings = true;
  /** The family builds an lm_head whatever tie_word_embeddings says (helium): it must be in the
   * checkpoint, and a tied model does not use it. */
  bool always_load_lm_head = false;
  bool head_bias = false;
  std::vector<BlockOptions> layers;
  std::optional<int> sliding_window;  // the window of the use_sliding layers
  /** The family's mlx-lm Model defines make_cache (then max_kv_size is ignored). */
  bool defines_make_cache = false;
  /** Weight paths: embed_tokens, layers.<i> and norm under `model`, the untied head at `lm_head`. */
  std::string model = "model", lm_head = "lm_head", embed_tokens = "embed_tokens", norm = "norm";
};

/** The Model: embedding, blocks, final norm, tied or untied head. The mask of the first full
 * layer serves every full layer and that of the first sliding layer every sliding one, as in
 * llama.py. */
class Decoder : public CausalLM {
 public:
  Decoder(DecoderOptions options, WeightBinder& w);

  mx::array operator()(const mx::array& inputs, CacheList* cache) override;
  /** The final norm's output: what `model.model(...)` returns in mlx-lm. */
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override;
  bool has_hidden_states() const override { return true; }
  CacheList make_cache() const override;
  bool defines_make_cache() const override { return o_.defines_make_cache; }
  std::vector<KvShape> kv_shapes() const override;
  int vocab_size() const override { return o_.vocab_size; }

 protected:
  /** The family hooks: the embedded inputs, and the logits from the final norm's output. */
  virtual mx::array embed(const mx::array& inputs) const { return embed_tokens_(inputs); }
  virtual mx::array head(const mx::array& h) const;
  /** The untied head or the tied embedding as a linear layer, for a head hook to call. */
  mx::array project_to_vocab(const mx::array& h) const;
  const Embedding& embed_tokens() const { return embed_tokens_; }
  const DecoderOptions& options() const { return o_; }

 private:
  DecoderOptions o_;
  Embedding embed_tokens_;
  std::vector<Block> layers_;
  Norm norm_;
  std::optional<Linear> lm_head_;
  /** Pipeline parallel: the group, and the layers [start, end) this rank runs (layers_ holds only those). */
  std::optional<mx::distributed::Group> pipeline_;
  LayerRange stage_;
  mx::array pipeline_hidden(mx::array h, CacheList* cache);
  size_t fa_idx_ = 0;              // first full-attention layer (its cache makes the full mask)
  std::optional<size_t> swa_idx_;  // first sliding layer, if any
};

}  // namespace mlxrt::model::nn
