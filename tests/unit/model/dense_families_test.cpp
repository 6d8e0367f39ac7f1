// The dense families on the decoder skeleton: each model_type resolves to its own graph and
// profile, the fingerprint covers the config keys that change the graph, and the loading rules
// their mlx-lm files have (sanitize, required keys). Logits parity with mlx-lm is checked by
// tests/parity on each family's fixtures.
#include <gtest/gtest.h>

#include <string>

#include "mlxrt/model/fingerprint.h"
#include "mlxrt/model/profile.h"
#include "tiny_checkpoint.h"

namespace mx = mlx::core;
using namespace mlxrt;
using namespace mlxrt::model;
using nlohmann::json;

namespace {

// hidden 16 over 2 heads of 8, one kv head, vocab 24, two layers.
json base_config(const std::string& model_type) {
  return {{"model_type", model_type}, {"hidden_size", 16}, {"num_hidden_layers", 2}, {"intermediate_size", 32},
          {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"vocab_size", 24},
          {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"max_position_embeddings", 128}};
}

// llama.py's tensors for the base config: q 16, k/v 8, MLP 32.
test::Shapes llama_shapes(const std::string& prefix = "model", bool head = true) {
  test::Shapes s = {{prefix + ".embed_tokens.weight", {24, 16}}, {prefix + ".norm.weight", {16}}};
  for (int i = 0; i < 2; ++i) {
    const auto l = prefix + ".layers." + std::to_string(i);
    s[l + ".input_layernorm.weight"] = {16};
    s[l + ".post_attention_layernorm.weight"] = {16};
    s[l + ".self_attn.q_proj.weight"] = {16, 16};
    s[l + ".self_attn.k_proj.weight"] = {8, 16};
    s[l + ".self_attn.v_proj.weight"] = {8, 16};
    s[l + ".self_attn.o_proj.weight"] = {16, 16};
    s[l + ".mlp.gate_proj.weight"] = {32, 16};
    s[l + ".mlp.up_proj.weight"] = {32, 16};
    s[l + ".mlp.down_proj.weight"] = {16, 32};
  }
  if (head) s[(prefix == "model" ? std::string() : prefix.substr(0, prefix.rfind('.') + 1)) + "lm_head.weight"] = {24, 16};
  return s;
}

struct Family {
  std::string model_type, graph;
};

class DenseFamily : public testing::TestWithParam<Family> {};

}  // namespace

TEST_P(DenseFamily, ResolvesToItsOwnGraph) {
  const auto& f = GetParam();
  json config = base_config(f.model_type);
  test::TinyCheckpoint m("profile_" + f.model_type, config, test::random_weights(llama_shapes(), 3));
  auto r = resolve_profile(io::ModelConfig::load(m.dir()));
  EXPECT_EQ(r.profile.id, f.graph + "-dedicated");
  EXPECT_EQ(to_string(r.profile.execution.graph), f.graph);
  EXPECT_EQ(r.profile.execution.specialization, Specialization::dedicated);
  EXPECT_EQ(to_json(r)["profile"]["required_capabilities"],
            json({"safetensors", "autoregressive", f.graph + "-graph"}));
  EXPECT_EQ(to_string(profile_from_json(to_json(r.profile), "p").execution.graph), f.graph);
}

INSTANTIATE_TEST_SUITE_P(Skeleton, DenseFamily,
                         testing::Values(Family{"mistral3", "mistral3"}, Family{"ministral3", "ministral3"},
                                         Family{"smollm3", "smollm3"},
                                         Family{"olmo2", "olmo2"},
                                         Family{"olmo3", "olmo3"},
                                         Family{"granite", "granite"},
                                         Family{"minicpm", "minicpm"},
                                         Family{"exaone4", "exaone4"},
                                         Family{"glm4", "glm4"},
                                         Family{"ernie4_5", "ernie4_5"},
                                         Family{"seed_oss", "seed_oss"},
                                         Family{"hunyuan_v1_dense", "hunyuan_v1_dense"},
                                         Family{"internlm3", "internlm3"},
                                         Family{"starcoder2", "starcoder2"},
                                         Family{"stablelm", "stablelm"},
                                         Family{"phi", "phi"},
                                         Family{"helium", "helium"},
                                         Family{"cohere2", "cohere2"}),
                         [](const auto& info) { return info.param.model_type; });

TEST(DenseFamilies, LlavaRunsAsMistral3) {
  json config = base_config("llava");
  test::TinyCheckpoint m("llava", config, test::random_weights(llama_shapes(), 3));
  auto r = resolve_profile(io::ModelConfig::load(m.dir()));
  EXPECT_EQ(r.profile.execution.graph, Graph::mistral3);
  EXPECT_EQ(r.profile.execution.specialization, Specialization::generic);
}

TEST(DenseFamilies, FingerprintCoversTheFamilyKeys) {
  json base = base_config("smollm3");
  base["no_rope_layers"] = json::array({1, 0});
  base["no_rope_layer_interval"] = 4;
  base["text_config"] = base_config("ministral3");
  base["rope_parameters"] = {{"llama_4_scaling_beta", 0.1}};
  const auto fp = config_fingerprint(base);
  for (const char* key : {"no_rope_layers", "no_rope_layer_interval", "text_config", "rope_parameters"}) {
    json changed = base;
    changed[key] = 3;
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}

TEST(DenseFamilies, Mistral3TakesTheTextModelUnderLanguageModel) {
  json config = {{"model_type", "mistral3"}, {"text_config", base_config("mistral")}};
  // mlx-lm's layout (language_model.*), a vision tower sanitize drops, and an untied head by default.
  auto shapes = llama_shapes("language_model.model");
  shapes["vision_tower.patch_conv.weight"] = {4, 3, 2, 2};
  test::TinyCheckpoint m("mistral3", config, test::random_weights(shapes, 4));
  const auto ours = test::logits_of(m.dir());
  // The transformers layout (model.language_model.*, lm_head.*) loads to the same logits.
  test::Arrays moved;
  for (auto& [name, a] : test::random_weights(shapes, 4)) {
    std::string to = name;
    if (name.rfind("language_model.model.", 0) == 0) to = "model.language_model." + name.substr(21);
    if (name == "language_model.lm_head.weight") to = "lm_head.weight";
    moved.insert({to, a});
  }
  test::TinyCheckpoint hf("mistral3_hf", config, moved);
  EXPECT_TRUE(mx::array_equal(test::logits_of(hf.dir()), ours).item<bool>());
  // Without its head the untied text model is incomplete.
  shapes.erase("language_model.lm_head.weight");
  test::TinyCheckpoint headless("mistral3_headless", config, test::random_weights(shapes, 4));
  EXPECT_NE(test::load_error(headless.dir()).find("language_model.lm_head.weight"), std::string::npos);
}

TEST(DenseFamilies, Smollm3NoRopeLayersChangeTheLogits) {
  json config = base_config("smollm3");
  config["no_rope_layers"] = json::array({1, 1});
  test::TinyCheckpoint rope("smollm3_rope", config, test::random_weights(llama_shapes(), 5));
  config["no_rope_layers"] = json::array({1, 0});
  test::TinyCheckpoint nope("smollm3_nope", config, test::random_weights(llama_shapes(), 5));
  EXPECT_FALSE(mx::array_equal(test::logits_of(rope.dir()), test::logits_of(nope.dir())).item<bool>());
  config["no_rope_layers"] = json::array({1});
  test::TinyCheckpoint bad("smollm3_bad", config, test::random_weights(llama_shapes(), 5));
  EXPECT_NE(test::load_error(bad.dir()).find("'no_rope_layers'"), std::string::npos);
}

TEST(DenseFamilies, FingerprintCoversTheDenseFamiliesKeys) {
  json base = base_config("granite");
  const auto fp = config_fingerprint(base);
  for (const char* key : {"logits_scaling", "attention_multiplier", "embedding_multiplier", "residual_multiplier",
                          "scale_emb", "scale_depth", "dim_model_base", "use_bias", "attention_out_bias",
                          "use_qk_norm", "bias", "qkv_bias", "norm_epsilon", "use_qkv_bias", "layer_norm_eps",
                          "use_parallel_residual", "qk_layernorm", "logit_scale", "layer_norm_bias",
                          "sliding_window_pattern", "partial_rotary_factor"}) {
    json changed = base;
    changed[key] = 3;
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}

TEST(DenseFamilies, MinicpmCopiesTheEmbeddingIntoAMissingHead) {
  json config = base_config("minicpm");
  config.update({{"dim_model_base", 8}, {"scale_depth", 1.4}, {"scale_emb", 12.0}});
  auto with_head = test::random_weights(llama_shapes(), 6);
  with_head.insert_or_assign("lm_head.weight", with_head.at("model.embed_tokens.weight"));
  test::TinyCheckpoint saved("minicpm_head", config, with_head);
  auto without = test::random_weights(llama_shapes(), 6);
  without.erase("lm_head.weight");
  test::TinyCheckpoint copied("minicpm_nohead", config, without);
  EXPECT_TRUE(mx::array_equal(test::logits_of(saved.dir()), test::logits_of(copied.dir())).item<bool>());
}

TEST(DenseFamilies, HeliumNeedsItsLmHeadEvenWhenTied) {
  json config = base_config("helium");
  config.update({{"attention_bias", false}, {"head_dim", 8}, {"mlp_bias", false}, {"tie_word_embeddings", true}});
  test::TinyCheckpoint with_head("helium_head", config, test::random_weights(llama_shapes(), 7));
  EXPECT_EQ(test::load_error(with_head.dir()), "");
  auto shapes = llama_shapes();
  shapes.erase("lm_head.weight");
  test::TinyCheckpoint without("helium_nohead", config, test::random_weights(shapes, 7));
  EXPECT_NE(test::load_error(without.dir()).find("lm_head.weight"), std::string::npos);
}
