// The gemma3n graph: its profile, the config keys its fingerprint covers, and gemma3n.py's loading
// rules (the towers under model. dropped, every text-model tensor required). Logits parity with
// mlx-lm is checked by tests/parity on the gemma3n fixtures.
#include <gtest/gtest.h>

#include <string>

#include "mlxrt/model/fingerprint.h"
#include "mlxrt/model/profile.h"
#include "mlxrt/model/registry.h"
#include "tiny_checkpoint.h"

namespace mx = mlx::core;
using namespace mlxrt;
using namespace mlxrt::model;
using nlohmann::json;

namespace {

// hidden 16, two heads of 8 over one KV head, vocab 24 (12 with per-layer inputs), three layers
// (sliding, full, sliding; the last one KV-shared), two AltUp inputs, Laurel rank 4.
json text_config() {
  return {{"model_type", "gemma3n_text"},
          {"hidden_size", 16},
          {"num_hidden_layers", 3},
          {"intermediate_size", 32},
          {"num_attention_heads", 2},
          {"head_dim", 8},
          {"rms_norm_eps", 1e-6},
          {"vocab_size", 24},
          {"num_key_value_heads", 1},
          {"num_kv_shared_layers", 1},
          {"vocab_size_per_layer_input", 12},
          {"sliding_window", 4},
          {"max_position_embeddings", 128},
          {"rope_local_base_freq", 10000.0},
          {"rope_theta", 1000000.0},
          {"final_logit_softcapping", 30.0},
          {"layer_types", {"sliding_attention", "full_attention", "sliding_attention"}},
          {"activation_sparsity_pattern", {0.95, 0.0, 0.0}},
          {"hidden_size_per_layer_input", 4},
          {"altup_num_inputs", 2},
          {"altup_coef_clip", 120.0},
          {"altup_correct_scale", true},
          {"altup_active_idx", 0},
          {"laurel_rank", 4}};
}

json config() { return {{"model_type", "gemma3n"}, {"text_config", text_config()}}; }

test::Shapes shapes() {
  const std::string m = "model.language_model.";
  test::Shapes s = {{m + "embed_tokens.weight", {24, 16}},
                    {m + "embed_tokens_per_layer.weight", {12, 12}},
                    {m + "per_layer_model_projection.weight", {12, 16}},
                    {m + "per_layer_projection_norm.weight", {4}},
                    {m + "altup_projections.0.weight", {16, 16}},
                    {m + "altup_unembed_projections.0.weight", {16, 16}},
                    {m + "norm.weight", {16}}};
  for (int i = 0; i < 3; ++i) {
    const auto l = m + "layers." + std::to_string(i) + ".";
    for (const char* norm : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                             "post_feedforward_layernorm", "post_per_layer_input_norm", "laurel.post_laurel_norm",
                             "altup.router_norm"})
      s[l + norm + ".weight"] = {16};
    s[l + "self_attn.q_proj.weight"] = {16, 16};
    s[l + "self_attn.k_proj.weight"] = {8, 16};
    s[l + "self_attn.v_proj.weight"] = {8, 16};
    s[l + "self_attn.o_proj.weight"] = {16, 16};
    s[l + "self_attn.q_norm.weight"] = {8};
    s[l + "self_attn.k_norm.weight"] = {8};
    s[l + "mlp.gate_proj.weight"] = {32, 16};
    s[l + "mlp.up_proj.weight"] = {32, 16};
    s[l + "mlp.down_proj.weight"] = {16, 32};
    s[l + "altup.correct_output_scale"] = {16};
    s[l + "altup.correction_coefs.weight"] = {2, 2};
    s[l + "altup.prediction_coefs.weight"] = {4, 2};
    s[l + "altup.modality_router.weight"] = {2, 16};
    s[l + "laurel.linear_left.weight"] = {4, 16};
    s[l + "laurel.linear_right.weight"] = {16, 4};
    s[l + "per_layer_input_gate.weight"] = {4, 16};
    s[l + "per_layer_projection.weight"] = {16, 4};
  }
  return s;
}

}  // namespace

TEST(Gemma3n, ResolvesToItsOwnGraph) {
  test::TinyCheckpoint m("gemma3n_profile", config(), test::random_weights(shapes(), 3));
  auto r = resolve_profile(io::ModelConfig::load(m.dir()));
  EXPECT_EQ(r.profile.id, "gemma3n-dedicated");
  EXPECT_EQ(r.profile.execution.graph, Graph::gemma3n);
  EXPECT_EQ(to_json(r)["profile"]["required_capabilities"],
            json({"safetensors", "autoregressive", "gemma3n-graph"}));
  EXPECT_EQ(profile_from_json(to_json(r.profile), "p").execution.graph, Graph::gemma3n);
  EXPECT_FALSE(graph_accepts(Graph::gemma3_text, "gemma3n"));
}

TEST(Gemma3n, FingerprintCoversTheTextModelAndItsKeys) {
  const json base = config();
  const auto fp = config_fingerprint(base);
  for (const char* key : {"altup_num_inputs", "laurel_rank", "activation_sparsity_pattern", "altup_coef_clip",
                          "altup_correct_scale", "altup_active_idx", "num_kv_shared_layers"}) {
    json nested = base;
    nested["text_config"][key] = 3;
    EXPECT_NE(config_fingerprint(nested), fp) << key;
    json top = base;
    top[key] = 3;
    EXPECT_NE(config_fingerprint(top), fp) << key;
  }
}

TEST(Gemma3n, SanitizeDropsTheTowersAndKeepsTheTextModel) {
  auto weights = test::random_weights(shapes(), 4);
  test::TinyCheckpoint text("gemma3n_text", config(), weights);
  const auto ours = test::logits_of(text.dir());
  EXPECT_EQ(ours.shape(), (mx::Shape{1, 4, 24}));
  // The vision and audio towers and their embedders, as a full checkpoint holds them.
  auto with_towers = weights;
  for (const char* name : {"model.vision_tower.stem.conv.weight", "model.audio_tower.conv.weight",
                           "model.embed_audio.embedding.weight", "model.embed_vision.embedding.weight"})
    with_towers.insert({name, mx::ones({2, 2})});
  test::TinyCheckpoint full("gemma3n_towers", config(), with_towers);
  EXPECT_TRUE(mx::array_equal(test::logits_of(full.dir()), ours).item<bool>());
  // A KV-shared layer keeps its own projections (a forward without a cache uses them).
  auto no_shared_k = weights;
  no_shared_k.erase("model.language_model.layers.2.self_attn.k_proj.weight");
  test::TinyCheckpoint missing("gemma3n_missing", config(), no_shared_k);
  EXPECT_NE(test::load_error(missing.dir()).find("model.language_model.layers.2.self_attn.k_proj.weight"),
            std::string::npos);
}
