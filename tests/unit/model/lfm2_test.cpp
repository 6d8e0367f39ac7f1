// lfm2: the profile it resolves to (a hybrid graph with recurrent state), the fingerprint keys it
// added, its caches (KVCache on attention layers, a one-slot ArraysCache on conv layers) and the
// conv state chunked calls leave. Logits parity with mlx-lm is checked by tests/parity.
#include <gtest/gtest.h>

#include <string>

#include "mlxrt/cache/arrays_cache.h"
#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/fingerprint.h"
#include "mlxrt/model/loader.h"
#include "mlxrt/model/profile.h"
#include "tiny_checkpoint.h"

namespace mx = mlx::core;
using namespace mlxrt;
using namespace mlxrt::model;
using nlohmann::json;

namespace {

// hidden 16 over 2 heads of 8, one kv head, vocab 24, three layers: conv, attention, conv.
json lfm2_config() {
  return {{"model_type", "lfm2"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 3},
          {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"max_position_embeddings", 128},
          {"norm_eps", 1e-5}, {"conv_bias", false}, {"conv_L_cache", 3}, {"block_dim", 16},
          {"block_ff_dim", 48}, {"block_multiple_of", 8}, {"block_ffn_dim_multiplier", 1.0},
          {"block_auto_adjust_ff_dim", true}, {"full_attn_idxs", {1}}};
}

// The MLP width: int(2 * 48 / 3) = 32, times 1.0, a multiple of 8: 32.
test::Shapes lfm2_shapes() {
  test::Shapes s = {{"model.embed_tokens.weight", {24, 16}}, {"model.embedding_norm.weight", {16}}};
  for (int i = 0; i < 3; ++i) {
    const auto l = "model.layers." + std::to_string(i);
    s[l + ".operator_norm.weight"] = {16};
    s[l + ".ffn_norm.weight"] = {16};
    s[l + ".feed_forward.w1.weight"] = {32, 16};
    s[l + ".feed_forward.w3.weight"] = {32, 16};
    s[l + ".feed_forward.w2.weight"] = {16, 32};
    if (i == 1) {
      s[l + ".self_attn.q_proj.weight"] = {16, 16};
      s[l + ".self_attn.k_proj.weight"] = {8, 16};
      s[l + ".self_attn.v_proj.weight"] = {8, 16};
      s[l + ".self_attn.out_proj.weight"] = {16, 16};
      s[l + ".self_attn.q_layernorm.weight"] = {8};
      s[l + ".self_attn.k_layernorm.weight"] = {8};
    } else {
      s[l + ".conv.in_proj.weight"] = {48, 16};
      s[l + ".conv.out_proj.weight"] = {16, 16};
      s[l + ".conv.conv.weight"] = {16, 3, 1};
    }
  }
  return s;
}

}  // namespace

TEST(Lfm2, ResolvesToTheHybridGraph) {
  test::TinyCheckpoint m("lfm2_profile", lfm2_config(), test::random_weights(lfm2_shapes(), 3));
  auto r = resolve_profile(io::ModelConfig::load(m.dir()));
  EXPECT_EQ(r.profile.id, "lfm2-dedicated");
  EXPECT_EQ(r.profile.execution.graph, Graph::lfm2);
  EXPECT_EQ(to_json(r)["profile"]["required_capabilities"],
            json({"safetensors", "autoregressive", "lfm2-graph", "recurrent-state", "hybrid-attention"}));
  EXPECT_EQ(profile_from_json(to_json(r.profile), "p").execution.graph, Graph::lfm2);
}

TEST(Lfm2, FingerprintCoversItsKeys) {
  json base = lfm2_config();
  const auto fp = config_fingerprint(base);
  for (const char* key : {"conv_bias", "conv_L_cache", "full_attn_idxs", "block_dim", "block_ff_dim",
                          "block_multiple_of", "block_ffn_dim_multiplier", "block_auto_adjust_ff_dim", "norm_eps"}) {
    json changed = base;
    changed[key] = 5;
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}

TEST(Lfm2, CachesPerLayerKindAndTheConvState) {
  test::TinyCheckpoint m("lfm2_cache", lfm2_config(), test::random_weights(lfm2_shapes(), 4));
  auto loaded = load_model(m.dir());
  auto cache = loaded.model->make_cache();
  ASSERT_EQ(cache.size(), 3u);
  EXPECT_NE(dynamic_cast<cache::ArraysCache*>(cache[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<cache::KVCache*>(cache[1].get()), nullptr);
  EXPECT_NE(dynamic_cast<cache::ArraysCache*>(cache[2].get()), nullptr);
  // Chunks of 1 and 4 tokens: each conv layer keeps its last conv_L_cache - 1 = 2 inputs.
  const auto tokens = mx::array({1, 5, 9, 3, 7}, {1, 5}, mx::int32);
  auto first = (*loaded.model)(mx::slice(tokens, {0, 0}, {1, 1}), &cache);
  auto rest = (*loaded.model)(mx::slice(tokens, {0, 1}, {1, 5}), &cache);
  mx::eval(first, rest);
  EXPECT_EQ(rest.shape(), (mx::Shape{1, 4, 24}));
  const auto& state = (*static_cast<cache::ArraysCache*>(cache[2].get()))[0];
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->shape(), (mx::Shape{1, 2, 16}));
  EXPECT_EQ(cache[0]->offset(), 5);
  EXPECT_EQ(loaded.model->array_state_shapes()[0], (std::vector<mx::Shape>{{1, 2, 16}}));
  EXPECT_TRUE(loaded.model->array_state_shapes()[1].empty());
}
