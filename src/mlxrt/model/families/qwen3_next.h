#pragma once
/** The blocks of mlx_lm/models/qwen3_next.py that qwen3_5.py imports (its Attention, MLP,
 * RMSNormGated and sparse MoE block), the gated delta net's shared second half, and the hybrid
 * decoder both families build: every full_attention_interval-th layer softmax attention over a
 * KVCache, the others a gated delta net over an ArraysCache (conv state, recurrent state).
 *
 * Distributed (both models are PipelineMixins; only qwen3_5.py defines shard()): with the binder's
 * tensor group each block binds this rank's part as qwen3_5.py's shard() splits it, and with its
 * pipeline group the model binds and runs only this rank's layers. */
#include <memory>
#include <optional>
#include <string>
#include <functional>
#include <variant>
#include <vector>

#include <mlx/array.h>
#include <mlx/distributed/distributed.h>
#include <nlohmann/json.hpp>

#include "mlxrt/cache/arrays_cache.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/mtp.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/moe.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::qwen3_next {

/** Which layers get the sparse MoE block (qwen3_next honours decoder_sparse_step and
 * mlp_only_layers; qwen3_5 makes every layer sparse when num_experts > 0). */
enum class SparseLayers { by_step, all };

/** The arguments both families' layers read (qwen3_next.ModelArgs, qwen3_5.TextModelArgs). */
struct Args {
  std::string model_type;
  int hidden_size = 0, num_hidden_layers = 0, intermediate_size = 0, num_attention_heads = 0;
  int linear_num_value_heads = 0, linear_num_key_heads = 0, linear_key_head_dim = 0, linear_value_head_dim = 0;
  int linear_conv_kernel_dim = 0;
  int num_experts = 0, num_experts_per_tok = 0, decoder_sparse_step = 1, shared_expert_intermediate_size = 0;
  int moe_intermediate_size = 0;
  std::vector<int> mlp_only_layers;
  float rms_norm_eps = 1e-6f;
  int vocab_size = 0, num_key_value_heads = 0, max_position_embeddings = 0, head_dim = 0;
  double rope_theta = 0, partial_rotary_factor = 1.0;
  bool norm_topk_prob = false, tie_word_embeddings = false, attention_bias = false;
  nlohmann::json rope_scaling;
  int full_attention_interval = 4;

  int mtp_num_hidden_layers = 1;  // the multi-token-prediction head's decoder layers (qwen3_next_mtp.h)

  bool is_linear(int layer) const { return (layer + 1) % full_attention_interval != 0; }
  /** Whether layer `layer` gets the sparse MoE block (SparseLayers below). */
  bool sparse_at(int layer, SparseLayers sparse) const;
  /** Checks what both families' constructors would fail on later (or never, computing garbage):
   * positive sizes, heads that divide, an interval that names at least one full-attention layer. */
  void validate(const std::string& source) const;
  /** qwen3_5.py's shard() over `group_size` ranks splits every one of these evenly: ConfigError
   * naming the config field that the world size does not divide (the key/value heads are repeated
   * instead when there are fewer of them than ranks, which then must be a multiple of them). */
  void check_tensor_split(int group_size, const std::string& source) const;
};

/** The world size of the binder's tensor group (1 when the model is not sharded). */
int tensor_shards(const WeightBinder& w);

/** Qwen3NextRMSNormGated: rms_norm with the weight, then precise_swiglu(x, gate, normed). */
class RMSNormGated {
 public:
  static RMSNormGated load(WeightBinder& w, const std::string& path, int dims, float eps);
  mx::array operator()(const mx::array& hidden_states, const std::optional<mx::array>& gate) const;

 private:
  RMSNormGated(mx::array weight, float eps) : weight_(std::move(weight)), eps_(eps) {}
  mx::array weight_;
  float eps_;
};

/** Qwen3NextAttention: q_proj doubled into queries and an output gate, q/k norms, partial RoPE.
 * Sharded: q/k/v all-to-sharded (k/v first repeated to one head per rank when there are fewer key/
 * value heads than ranks), o_proj sharded-to-all; the head counts are this rank's. */
struct Attention {
  int num_attention_heads, num_key_value_heads, head_dim;
  float scale;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  nn::RMSNorm q_norm, k_norm;
  nn::Rope rope;
  bool per_query_row = false;  // row-exact loads: each query attends alone (nn::attend_each_query)

  Attention(const Args& args, WeightBinder& w, const std::string& p);
  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const;
};

/** Qwen3NextMLP: down(swiglu(gate(x), up(x))). Sharded: gate/up all-to-sharded, down sharded-to-all. */
struct MLP {
  nn::Linear gate_proj, down_proj, up_proj;
  MLP(int dim, int hidden_dim, WeightBinder& w, const std::string& p);
  mx::array operator()(const mx::array& x) const;
};

/** Qwen3NextSparseMoeBlock: a precise softmax over the experts, the top k by argpartition (with
 * norm_topk_prob), SwitchGLU over them, and a shared expert scaled by a sigmoid gate. */
nn::SparseMoe sparse_moe_block(const Args& args, WeightBinder& w, const std::string& p);

/** The gated delta net after its input projections, shared by both families: the causal
 * depthwise convolution over [conv state, mixed qkv] with SiLU, q/k normalisation, the gated delta
 * recurrence, the gated RMSNorm and out_proj. The projections (fused and reordered in
 * qwen3_next, separate in qwen3_5) stay in each family's file. Sharded (qwen3_5.py's shard()):
 * the convolution's q, k and v channels, dt_bias and A_log split across the group, out_proj
 * sharded-to-all in place and its output summed over the group; the sizes below are this rank's. */
class GatedDeltaCore {
 public:
  GatedDeltaCore(const Args& args, WeightBinder& w, const std::string& p);
  /** mixed_qkv [B, S, conv_dim], z [B, S, Hv, Dv], b and a [B, S, Hv] -> [B, S, hidden]. */
  mx::array operator()(const mx::array& mixed_qkv, const mx::array& z, const mx::array& b, const mx::array& a,
                       cache::ArraysCache* cache) const;
  /** Ends `cache`'s open verify window (ArraysCache::Window) keeping its first `keep` positions:
   * the conv state is the window's inputs from `keep` back, the recurrent state the state-only
   * replay of those positions (nn::gated_delta_replay_state), byte-equal to what a forward over
   * only those positions leaves. */
  void keep_window(cache::ArraysCache& cache, int keep) const;

  int num_v_heads, num_k_heads, head_k_dim, head_v_dim, key_dim, value_dim, conv_kernel_size, conv_dim;

 private:
  mx::array conv1d_weight_;  // [conv_dim, kernel, 1]: depthwise, groups = conv_dim
  mx::array dt_bias_, A_log_;
  RMSNormGated norm_;
  nn::Linear out_proj_;
  std::optional<mx::distributed::Group> sum_over_;  // sharded: the group out_proj's output is summed over
  /** Row-exact loads: a many-token input runs as one-token steps (the convolution over a chunk and
   * the recurrence's chunked form are not a decoding step's arithmetic). */
  bool per_token_ = false;
  mx::array step(const mx::array& mixed_qkv, const mx::array& z, const mx::array& b, const mx::array& a,
                 cache::ArraysCache* cache) const;
};

/** A layer's linear-attention half: the family's projections in front of GatedDeltaCore. */
class LinearAttention {
 public:
  virtual ~LinearAttention() = default;
  virtual mx::array operator()(const mx::array& x, cache::ArraysCache* cache) const = 0;
  virtual const GatedDeltaCore& core() const = 0;
};

using LinearAttentionFactory =
    std::function<std::unique_ptr<LinearAttention>(const Args&, WeightBinder&, const std::string& path)>;

/** DecoderLayer / Qwen3NextDecoderLayer: pre-norm residual blocks around the linear or full
 * attention and the dense or sparse MLP. */
struct DecoderLayer {
  bool is_linear;
  std::unique_ptr<LinearAttention> linear_attn;
  std::optional<Attention> self_attn;
  nn::RMSNorm input_layernorm, post_attention_layernorm;
  std::variant<MLP, nn::SparseMoe> mlp;

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const;
};


/** A DecoderLayer bound from `p` (the linear attention from `linear_attention`). */
DecoderLayer load_decoder_layer(const Args& args, WeightBinder& w, const std::string& p, bool linear, bool moe,
                                const LinearAttentionFactory& linear_attention);

class MtpHead;  // qwen3_next_mtp.h

/** The hybrid decoder with its head: `prefix` is "" (qwen3_next) or "language_model." (qwen3_5).
 * With the binder's multi_token_prediction, also the checkpoint's MTP head (one process only). */
class HybridModel final : public CausalLM, public MultiTokenPredictor {
 public:
  HybridModel(Args args, WeightBinder& w, const std::string& prefix, const LinearAttentionFactory& linear_attention,
              SparseLayers sparse);
  ~HybridModel() override;

  mx::array operator()(const mx::array& inputs, CacheList* cache) override;
  /** model.model(...): the final norm's output, what the head reads. */
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override;
  bool has_hidden_states() const override { return true; }
  CacheList make_cache() const override;
  bool defines_make_cache() const override { return true; }
  std::vector<KvShape> kv_shapes() const override;
  std::vector<std::vector<mx::Shape>> array_state_shapes() const override;
  int vocab_size() const override { return args_.vocab_size; }

  MultiTokenPredictor* multi_token_predictor() override { return mtp_ ? this : nullptr; }
  std::pair<mx::array, mx::array> forward_with_hidden(const mx::array& inputs, CacheList* cache) override;
  std::pair<mx::array, mx::array> predict(const mx::array& tokens, const mx::array& hidden,
                                          CacheList* mtp_cache) override;
  CacheList make_mtp_cache() const override;
  bool supports_verify_window() const override { return !pipeline_ && shards_ == 1; }
  void open_window(CacheList& cache) override;
  void keep_window(CacheList& cache, int window, int keep) override;

 private:
  /** The output head over hidden states (lm_head, or the tied embedding). */
  mx::array head(const mx::array& hidden) const;

  /** PipelineMixin's __call__: the hidden state from the rank after this one (the earlier layers),
   * this rank's layers, sent on to the rank before it, and rank 0's result gathered by every rank. */
  mx::array pipeline_hidden(mx::array h, CacheList* cache);

  Args args_;
  nn::Embedding embed_tokens_;
  std::vector<DecoderLayer> layers_;  // pipeline: only this rank's, in order
  nn::RMSNorm norm_;
  std::optional<nn::Linear> lm_head_;
  // The layers whose caches make the full-attention and the SSM masks (pipeline: the first of each
  // kind on this rank, if it holds one).
  std::optional<size_t> fa_idx_, ssm_idx_;
  int shards_ = 1;                                   // tensor parallel: the world size
  std::optional<mx::distributed::Group> head_group_;  // sharded untied head: its vocabulary slices are gathered
  std::optional<mx::distributed::Group> pipeline_;
  std::unique_ptr<MtpHead> mtp_;
};

/** qwen3_next.py's and qwen3_5.py's sanitize for checkpoints in Hugging Face's layout (mlx-lm
 * converts them on load; MLX checkpoints are already in this layout): conv1d weights [C, 1, K]
 * moved to [C, K, 1], and the (1 + weight) norms stored as their offsets given the 1. Applied when
 * `also_norms` (qwen3_5: only if a conv1d weight needed moving; qwen3_next: for per-expert
 * checkpoints). Returns whether a conv1d weight was moved. */
bool sanitize_conv_and_norms(WeightBinder& w, bool norms_when_conv_moved, bool norms_always);

}  // namespace mlxrt::model::qwen3_next
