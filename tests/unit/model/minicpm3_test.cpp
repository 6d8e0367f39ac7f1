// minicpm3: the profile it resolves to and the fingerprint keys it added. Logits parity with mlx-lm
// (latent attention, SuScaledRoPE, tied and untied heads) is checked by tests/parity.
#include <gtest/gtest.h>

#include <string>

#include "mlxrt/model/fingerprint.h"
#include "mlxrt/model/profile.h"
#include "tiny_checkpoint.h"

using namespace mlxrt;
using namespace mlxrt::model;
using nlohmann::json;

namespace {

// hidden 16 over 2 heads (values of 8), keys of 4 + 4 RoPE'd, ranks 8, vocab 24, one layer, tied.
json minicpm3_config() {
  return {{"model_type", "minicpm3"}, {"hidden_size", 16}, {"dim_model_base", 4}, {"num_hidden_layers", 1},
          {"intermediate_size", 32}, {"num_attention_heads", 2}, {"rms_norm_eps", 1e-5}, {"vocab_size", 24},
          {"num_key_value_heads", 2}, {"q_lora_rank", 8}, {"qk_nope_head_dim", 4}, {"qk_rope_head_dim", 4},
          {"kv_lora_rank", 8}, {"scale_depth", 1.4}, {"scale_emb", 12.0}, {"max_position_embeddings", 128},
          {"rope_scaling", {{"type", "longrope"}}}, {"tie_word_embeddings", true}};
}

test::Shapes minicpm3_shapes() {
  const std::string l = "model.layers.0";
  return {{"model.embed_tokens.weight", {24, 16}}, {"model.norm.weight", {16}},
          {l + ".input_layernorm.weight", {16}}, {l + ".post_attention_layernorm.weight", {16}},
          {l + ".self_attn.q_a_proj.weight", {8, 16}}, {l + ".self_attn.q_a_layernorm.weight", {8}},
          {l + ".self_attn.q_b_proj.weight", {16, 8}}, {l + ".self_attn.kv_a_proj_with_mqa.weight", {12, 16}},
          {l + ".self_attn.kv_a_layernorm.weight", {8}}, {l + ".self_attn.kv_b_proj.weight", {24, 8}},
          {l + ".self_attn.o_proj.weight", {16, 16}}, {l + ".mlp.gate_proj.weight", {32, 16}},
          {l + ".mlp.up_proj.weight", {32, 16}}, {l + ".mlp.down_proj.weight", {16, 32}}};
}

}  // namespace

TEST(Minicpm3, ResolvesToItsOwnGraphAndLoads) {
  test::TinyCheckpoint m("minicpm3_profile", minicpm3_config(), test::random_weights(minicpm3_shapes(), 3));
  auto r = resolve_profile(io::ModelConfig::load(m.dir()));
  EXPECT_EQ(r.profile.id, "minicpm3-dedicated");
  EXPECT_EQ(r.profile.execution.graph, Graph::minicpm3);
  EXPECT_EQ(to_json(r)["profile"]["required_capabilities"],
            json({"safetensors", "autoregressive", "minicpm3-graph"}));
  EXPECT_EQ(test::load_error(m.dir()), "");
}

TEST(Minicpm3, FingerprintCoversItsKeys) {
  json base = minicpm3_config();
  const auto fp = config_fingerprint(base);
  for (const char* key : {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim"}) {
    json changed = base;
    changed[key] = 6;
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}
