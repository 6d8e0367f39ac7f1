// The qwen2 graph: its profile, the config keys its fingerprint covers, and qwen2.py's loading
// rules (biases on q/k/v only, sanitize, head_dim from hidden_size). Logits parity with mlx-lm is
// checked by tests/parity on the qwen2_* fixtures.
#include <gtest/gtest.h>

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

// hidden 16 over 2 heads: head_dim 8 (the config's head_dim is not read by qwen2.py).
json tiny_config() {
  return {{"model_type", "qwen2"}, {"hidden_size", 16}, {"num_hidden_layers", 1}, {"intermediate_size", 32},
          {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 64}, {"vocab_size", 24},
          {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"tie_word_embeddings", true}};
}

std::map<std::string, mx::Shape> tiny_weights() {
  return {{"model.embed_tokens.weight", {24, 16}},
          {"model.norm.weight", {16}},
          {"model.layers.0.input_layernorm.weight", {16}},
          {"model.layers.0.post_attention_layernorm.weight", {16}},
          {"model.layers.0.self_attn.q_proj.weight", {16, 16}},
          {"model.layers.0.self_attn.q_proj.bias", {16}},
          {"model.layers.0.self_attn.k_proj.weight", {8, 16}},
          {"model.layers.0.self_attn.k_proj.bias", {8}},
          {"model.layers.0.self_attn.v_proj.weight", {8, 16}},
          {"model.layers.0.self_attn.v_proj.bias", {8}},
          {"model.layers.0.self_attn.o_proj.weight", {16, 16}},
          {"model.layers.0.mlp.gate_proj.weight", {32, 16}},
          {"model.layers.0.mlp.up_proj.weight", {32, 16}},
          {"model.layers.0.mlp.down_proj.weight", {16, 32}}};
}

using test::Arrays;
using test::load_error;
using test::logits_of;
using test::Shapes;

Arrays random_weights(const Shapes& shapes) { return test::random_weights(shapes, 7); }

struct TinyQwen2 : test::TinyCheckpoint {
  TinyQwen2(const std::string& name, const json& config, const Arrays& arrays)
      : TinyCheckpoint("qwen2_" + name, config, arrays) {}
  TinyQwen2(const std::string& name, const json& config, const Shapes& shapes)
      : TinyQwen2(name, config, random_weights(shapes)) {}
};

}  // namespace

TEST(Qwen2, ResolvesToTheQwen2Graph) {
  TinyQwen2 m("profile", tiny_config(), tiny_weights());
  auto r = resolve_profile(io::ModelConfig::load(m.dir()));
  EXPECT_EQ(r.profile.id, "qwen2-dedicated");
  EXPECT_EQ(r.profile.execution.graph, Graph::qwen2);
  EXPECT_EQ(r.profile.execution.specialization, Specialization::dedicated);
  EXPECT_EQ(to_json(r)["profile"]["required_capabilities"],
            json({"safetensors", "autoregressive", "qwen2-graph"}));
  EXPECT_EQ(to_json(r)["profile"]["execution"]["graph"], "qwen2");
  // A profile file may name the graph.
  auto p = profile_from_json(to_json(r.profile), "p");
  EXPECT_EQ(p.execution.graph, Graph::qwen2);
}

TEST(Qwen2, FingerprintCoversEveryModelArgsKey) {
  json base = tiny_config();
  base["max_position_embeddings"] = 32768;
  base["rope_traditional"] = false;
  base["rope_scaling"] = nullptr;
  const auto fp = config_fingerprint(base);
  for (const auto& [key, value] : base.items()) {
    json changed = base;
    changed[key] = value.is_boolean() ? json(!value.get<bool>()) : value.is_string() ? json("other") : json(3);
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}

TEST(Qwen2, LoadsAndRuns) {
  TinyQwen2 m("runs", tiny_config(), tiny_weights());
  auto logits = logits_of(m.dir());
  EXPECT_EQ(logits.shape(), (mx::Shape{1, 4, 24}));
  EXPECT_TRUE(mx::all(mx::isfinite(logits)).item<bool>());
}

TEST(Qwen2, SanitizeDropsTiedHeadAndRotaryFrequencies) {
  auto weights = random_weights(tiny_weights());
  TinyQwen2 plain("plain", tiny_config(), weights);
  auto extra = random_weights({{"lm_head.weight", {24, 16}}, {"model.layers.0.self_attn.rotary_emb.inv_freq", {4}}});
  weights.insert(extra.begin(), extra.end());
  TinyQwen2 sanitized("sanitized", tiny_config(), weights);
  EXPECT_TRUE(mx::array_equal(logits_of(plain.dir()), logits_of(sanitized.dir())).item<bool>());

  // An untied config builds lm_head, and then needs it.
  json untied = tiny_config();
  untied["tie_word_embeddings"] = false;
  TinyQwen2 no_head("nohead", untied, tiny_weights());
  EXPECT_NE(load_error(no_head.dir()).find("lm_head.weight"), std::string::npos);
}

TEST(Qwen2, BiasesOnQkvOnly) {
  auto missing = tiny_weights();
  missing.erase("model.layers.0.self_attn.k_proj.bias");
  TinyQwen2 m1("missingbias", tiny_config(), missing);
  EXPECT_NE(load_error(m1.dir()).find("model.layers.0.self_attn.k_proj.bias"), std::string::npos);

  auto o_bias = tiny_weights();
  o_bias["model.layers.0.self_attn.o_proj.bias"] = {16};
  TinyQwen2 m2("obias", tiny_config(), o_bias);
  EXPECT_NE(load_error(m2.dir()).find("model.layers.0.self_attn.o_proj.bias"), std::string::npos);
}

TEST(Qwen2, DefaultsAreQwen2Py) {
  // No tie_word_embeddings: tied (no lm_head needed); no rope_theta / max_position_embeddings.
  json c = tiny_config();
  c.erase("tie_word_embeddings");
  c.erase("rope_theta");
  TinyQwen2 m("defaults", c, tiny_weights());
  EXPECT_EQ(logits_of(m.dir()).shape(), (mx::Shape{1, 4, 24}));

  json zero_heads = tiny_config();
  zero_heads["num_attention_heads"] = 0;
  TinyQwen2 z("zeroheads", zero_heads, tiny_weights());
  EXPECT_NE(load_error(z.dir()).find("num_attention_heads"), std::string::npos);
}

TEST(Qwen2, MropeNeedsThreeSections) {
  // initialize_rope asserts three mrope sections; with them, text positions use a plain RoPE
  // (the qwen2_mrope fixture checks the logits against mlx-lm).
  json c = tiny_config();
  c["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {1, 1}}};
  TinyQwen2 bad("mrope2", c, tiny_weights());
  EXPECT_NE(load_error(bad.dir()).find("rope_scaling.mrope_section must list 3 sections"), std::string::npos);
  c["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {1, 1, 2}}};
  TinyQwen2 good("mrope3", c, tiny_weights());
  EXPECT_EQ(logits_of(good.dir()).shape(), (mx::Shape{1, 4, 24}));
}
