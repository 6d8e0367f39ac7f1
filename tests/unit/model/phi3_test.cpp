// The phi3 graph: its profile, the config keys its fingerprint covers, and phi3.py's loading rules
// (fused projections, untied head by default, no sanitize, the rope_scaling checks of its
// ModelArgs). Logits parity with mlx-lm is checked by tests/parity on the phi3_* fixtures.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <mlx/io.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/model/fingerprint.h"
#include "mlxrt/model/loader.h"
#include "mlxrt/model/profile.h"
#include "mlxrt/util/errors.h"
#include "tiny_checkpoint.h"

namespace fs = std::filesystem;
namespace mx = mlx::core;
using namespace mlxrt;
using namespace mlxrt::model;
using nlohmann::json;

namespace {

// hidden 16 over 2 heads: head_dim 8; one kv head, so qkv_proj has 16 + 2 * 8 outputs.
json tiny_config() {
  return {{"model_type", "phi3"}, {"hidden_size", 16}, {"num_hidden_layers", 1}, {"intermediate_size", 32},
          {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"vocab_size", 24},
          {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}};
}

std::map<std::string, mx::Shape> tiny_weights(int kv_heads = 1) {
  return {{"model.embed_tokens.weight", {24, 16}},
          {"model.norm.weight", {16}},
          {"model.layers.0.input_layernorm.weight", {16}},
          {"model.layers.0.post_attention_layernorm.weight", {16}},
          {"model.layers.0.self_attn.qkv_proj.weight", {16 + 2 * kv_heads * 8, 16}},
          {"model.layers.0.self_attn.o_proj.weight", {16, 16}},
          {"model.layers.0.mlp.gate_up_proj.weight", {64, 16}},
          {"model.layers.0.mlp.down_proj.weight", {16, 32}},
          {"lm_head.weight", {24, 16}}};
}

using test::Arrays;
using test::load_error;
using test::logits_of;
using test::Shapes;

Arrays random_weights(const Shapes& shapes) { return test::random_weights(shapes, 11); }

struct TinyPhi3 : test::TinyCheckpoint {
  TinyPhi3(const std::string& name, const json& config, const Arrays& arrays)
      : TinyCheckpoint("phi3_" + name, config, arrays) {}
  TinyPhi3(const std::string& name, const json& config, const Shapes& shapes)
      : TinyPhi3(name, config, random_weights(shapes)) {}
};

json with_scaling(json scaling) {
  json c = tiny_config();
  c["rope_scaling"] = std::move(scaling);
  return c;
}

}  // namespace

TEST(Phi3, ResolvesToThePhi3Graph) {
  TinyPhi3 m("profile", tiny_config(), tiny_weights());
  auto r = resolve_profile(io::ModelConfig::load(m.dir()));
  EXPECT_EQ(r.profile.id, "phi3-dedicated");
  EXPECT_EQ(r.profile.execution.graph, Graph::phi3);
  EXPECT_EQ(r.profile.execution.specialization, Specialization::dedicated);
  EXPECT_EQ(to_json(r)["profile"]["required_capabilities"], json({"safetensors", "autoregressive", "phi3-graph"}));
  auto p = profile_from_json(to_json(r.profile), "p");
  EXPECT_EQ(p.execution.graph, Graph::phi3);
}

TEST(Phi3, FingerprintCoversEveryModelArgsKey) {
  json base = tiny_config();
  base["rope_traditional"] = false;
  base["rope_scaling"] = nullptr;
  base["partial_rotary_factor"] = 0.75;
  base["max_position_embeddings"] = 131072;
  base["original_max_position_embeddings"] = 4096;
  base["tie_word_embeddings"] = false;
  const auto fp = config_fingerprint(base);
  for (const auto& [key, value] : base.items()) {
    json changed = base;
    changed[key] = value.is_boolean() ? json(!value.get<bool>()) : value.is_string() ? json("other") : json(3);
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}

TEST(Phi3, UntiedByDefaultAndNoSanitize) {
  TinyPhi3 m("untied", tiny_config(), tiny_weights());
  auto logits = logits_of(m.dir());
  EXPECT_EQ(logits.shape(), (mx::Shape{1, 4, 24}));
  EXPECT_TRUE(mx::all(mx::isfinite(logits)).item<bool>());

  // Without tie_word_embeddings the head is lm_head, which must be there.
  auto no_head = tiny_weights();
  no_head.erase("lm_head.weight");
  TinyPhi3 missing("nohead", tiny_config(), no_head);
  EXPECT_NE(load_error(missing.dir()).find("lm_head.weight"), std::string::npos);

  // Tied: the embedding is the head; phi3.py has no sanitize, so a saved lm_head is refused.
  json tied = tiny_config();
  tied["tie_word_embeddings"] = true;
  TinyPhi3 tied_ok("tied", tied, no_head);
  EXPECT_EQ(logits_of(tied_ok.dir()).shape(), (mx::Shape{1, 4, 24}));
  TinyPhi3 tied_extra("tiedextra", tied, tiny_weights());
  EXPECT_NE(load_error(tied_extra.dir()).find("lm_head.weight"), std::string::npos);
}

TEST(Phi3, FusedProjectionShapes) {
  // num_key_value_heads defaults to num_attention_heads: qkv_proj then has 3 * 16 outputs.
  json c = tiny_config();
  c.erase("num_key_value_heads");
  TinyPhi3 mha("mha", c, tiny_weights(2));
  EXPECT_EQ(logits_of(mha.dir()).shape(), (mx::Shape{1, 4, 24}));
  TinyPhi3 gqa_weights("mhagqa", c, tiny_weights(1));
  EXPECT_NE(load_error(gqa_weights.dir()).find("model.layers.0.self_attn.qkv_proj.weight"), std::string::npos);

  auto separate = tiny_weights();
  separate.erase("model.layers.0.mlp.gate_up_proj.weight");
  separate["model.layers.0.mlp.gate_proj.weight"] = {32, 16};
  separate["model.layers.0.mlp.up_proj.weight"] = {32, 16};
  TinyPhi3 split("split", tiny_config(), separate);
  const auto err = load_error(split.dir());
  EXPECT_NE(err.find("model.layers.0.mlp.gate_up_proj.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << err;
}

TEST(Phi3, RopeScalingChecksOfModelArgs) {
  const auto weights = random_weights(tiny_weights());
  TinyPhi3 plain("plainrope", tiny_config(), weights);
  const auto want = logits_of(plain.dir());

  // A type phi3.py does not support is dropped (a plain RoPE), once the required keys are there.
  TinyPhi3 yarn("yarn", with_scaling({{"type", "yarn"}, {"factor", 4.0}, {"long_factor", {1.0}}}), weights);
  EXPECT_TRUE(mx::array_equal(logits_of(yarn.dir()), want).item<bool>());
  // An empty rope_scaling counts as none.
  TinyPhi3 empty("empty", with_scaling(json::object()), weights);
  EXPECT_TRUE(mx::array_equal(logits_of(empty.dir()), want).item<bool>());

  TinyPhi3 no_long("nolong", with_scaling({{"type", "longrope"}, {"short_factor", {1.0}}}), weights);
  EXPECT_NE(load_error(no_long.dir()).find("rope_scaling must contain keys"), std::string::npos);
  TinyPhi3 no_type("notype", with_scaling({{"rope_type", "longrope"}, {"long_factor", {1.0}}}), weights);
  EXPECT_NE(load_error(no_type.dir()).find("rope_scaling must contain keys"), std::string::npos);
  TinyPhi3 no_short("noshort", with_scaling({{"type", "su"}, {"long_factor", {1.0, 1.0}}}), weights);
  EXPECT_NE(load_error(no_short.dir()).find("rope_scaling.short_factor"), std::string::npos);
  // phi3.py asserts a float factor for linear scaling.
  TinyPhi3 int_factor("intfactor", with_scaling({{"type", "linear"}, {"factor", 2}, {"long_factor", {1.0}}}),
                      weights);
  EXPECT_NE(load_error(int_factor.dir()).find("rope_scaling.factor must be a float"), std::string::npos);

  // longrope rotates with the long factors (head_dim 8: four of them); the short ones are unused.
  json su = with_scaling({{"type", "longrope"}, {"short_factor", {1.0, 1.0, 1.0, 1.0}},
                          {"long_factor", {1.0, 1.0, 1.0, 1.0}}});
  TinyPhi3 ones("ones", su, weights);
  const auto with_ones = logits_of(ones.dir());
  su["rope_scaling"]["short_factor"] = {5.0, 5.0, 5.0, 5.0};
  TinyPhi3 short5("short5", su, weights);
  EXPECT_TRUE(mx::array_equal(logits_of(short5.dir()), with_ones).item<bool>());
  su["rope_scaling"]["long_factor"] = {1.0, 3.0, 3.0, 3.0};
  TinyPhi3 long3("long3", su, weights);
  EXPECT_FALSE(mx::array_equal(logits_of(long3.dir()), with_ones).item<bool>());
}
