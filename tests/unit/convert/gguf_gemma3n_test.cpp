// Gemma 3n's GGUF metadata back into mlx-lm's gemma3n config (with the values the file leaves out
// named as notes), its tensor names, the split of the stacked AltUp matrices and the per-layer
// embeddings' padding dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gguf_builder.h"
#include "gguf_parsed.h"
#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/convert/gguf_blocks.h"
#include "mlxrt/convert/gguf_gemma3n.h"
#include "mlxrt/util/errors.h"

using namespace mlxrt::convert;
using mlxrt::convert::testing::GgufBuilder;

namespace {

using Parsed = mlxrt::convert::testing::ParsedGguf;
Parsed parse(const GgufBuilder& b) { return mlxrt::convert::testing::parse_built(b); }

constexpr uint32_t kF32 = 0, kF16 = 1;
constexpr float kInf = INFINITY;

struct Layout {
  std::vector<int32_t> sliding = {1, 1, 0, 1, 0};
  uint32_t shared = 2;
  uint64_t per_layer_rows = 6;  // of the per-layer token embeddings
  bool nonzero_padding = false;
  bool window_pattern = true, swa_base = true, softcap = true;
  std::vector<float> sparsity = {1.6448533535003662f, 1.6448533535003662f, -kInf, -kInf, -kInf};
  uint64_t stacked = 3;  // AltUp matrices after the first input
};

// E2B's layout in small: 5 layers (0, 1, 3 slide; 2 and 4 are full), the last two KV-shared,
// hidden 32, per-layer inputs of 2 (a per-layer row of 10 F16 values).
GgufBuilder gemma3n(const Layout& l = {}) {
  GgufBuilder b;
  b.str("general.architecture", "gemma3n").u32("general.file_type", 32).u32("gemma3n.block_count", 5);
  b.u32("gemma3n.embedding_length", 32).u32("gemma3n.context_length", 4096).u32("gemma3n.attention.head_count", 2);
  b.u32("gemma3n.attention.head_count_kv", 1).u32("gemma3n.attention.key_length", 16);
  b.u32("gemma3n.attention.value_length", 16).i32s("gemma3n.feed_forward_length", {64, 64, 64, 64, 64});
  b.f32("gemma3n.rope.freq_base", 1000000.0f).f32("gemma3n.attention.layer_norm_rms_epsilon", 1e-6f);
  if (l.swa_base) b.f32("gemma3n.rope.freq_base_swa", 10000.0f);
  if (l.softcap) b.f32("gemma3n.final_logit_softcapping", 30.0f);
  b.u32("gemma3n.attention.sliding_window", 4).u32("gemma3n.altup.active_idx", 0).u32("gemma3n.altup.num_inputs", 4);
  b.u32("gemma3n.embedding_length_per_layer_input", 2).u32("gemma3n.attention.shared_kv_layers", l.shared);
  b.f32s("gemma3n.activation_sparsity_scale", l.sparsity);
  if (l.window_pattern) b.i32s("gemma3n.attention.sliding_window_pattern", l.sliding);
  b.tensor("token_embd.weight", {32, 7}, kF16, std::string(32 * 7 * 2, '\0'));
  std::string per_layer(10 * 2 * l.per_layer_rows, '\0');
  for (size_t i = 0; i < std::min<size_t>(per_layer.size(), 40); ++i) per_layer[i] = 1;  // the first rows' values
  if (l.nonzero_padding) per_layer.back() = 1;
  b.tensor("per_layer_token_embd.weight", {10, l.per_layer_rows}, kF16, per_layer);
  b.tensor("altup_proj.weight", {32, 32, l.stacked}, kF16, std::string(32 * 32 * l.stacked * 2, '\0'));
  b.tensor("altup_unembd_proj.weight", {32, 32, 3}, kF16, std::string(32 * 32 * 3 * 2, '\0'));
  b.tensor("blk.0.laurel_l.weight", {32, 4}, kF16, std::string(32 * 4 * 2, '\0'));
  b.tensor("blk.0.altup_correct_scale.weight", {32}, kF32, std::string(32 * 4, '\0'));
  b.tensor("blk.0.altup_predict_coef.weight", {4, 16}, kF32, std::string(4 * 16 * 4, '\0'));
  return b;
}

nlohmann::ordered_json config_of(const Parsed& p, std::vector<std::string>* notes = nullptr) {
  return build_model_config(find_architecture(p.file), p.file, p.data(), notes);
}

template <typename Error>
std::string error_of(const Parsed& p) {
  try {
    config_of(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has_note(const std::vector<std::string>& notes, const std::string& text) {
  for (const auto& n : notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(GgufGemma3n, SparsityFromItsNormalQuantile) {
  // torch's float32 icdf of 0.95 (what llama.cpp's converter writes, and hard-codes at run time)
  EXPECT_EQ(gemma3n_sparsity(1.6448533535003662), 0.95);
  EXPECT_EQ(gemma3n_sparsity(-INFINITY), 0.0);  // a layer without sparsity
  EXPECT_EQ(gemma3n_sparsity(0.0), 0.5);
  EXPECT_EQ(gemma3n_sparsity(static_cast<float>(0.8416212335729143)), 0.8);
  EXPECT_EQ(gemma3n_sparsity(static_cast<float>(-1.2815515655446004)), 0.1);
  EXPECT_FALSE(gemma3n_sparsity(NAN));
  EXPECT_FALSE(gemma3n_sparsity(INFINITY));
  EXPECT_FALSE(gemma3n_sparsity(40.0));  // a sparsity that rounds to 1
}

TEST(GgufGemma3n, ConfigUnderTextConfig) {
  auto p = parse(gemma3n());
  const auto& arch = find_architecture(p.file);
  EXPECT_STREQ(arch.model_type, "gemma3n");
  std::vector<std::string> notes;
  auto c = config_of(p, &notes);
  EXPECT_EQ(c["model_type"], "gemma3n");
  EXPECT_EQ(c["architectures"], nlohmann::ordered_json({"Gemma3nForConditionalGeneration"}));
  const auto& t = c["text_config"];
  EXPECT_EQ(t["model_type"], "gemma3n_text");
  EXPECT_EQ(t["hidden_size"], 32);
  EXPECT_EQ(t["num_hidden_layers"], 5);
  EXPECT_EQ(t["intermediate_size"], nlohmann::ordered_json({64, 64, 64, 64, 64}));
  EXPECT_EQ(t["head_dim"], 16);
  EXPECT_EQ(t["num_key_value_heads"], 1);
  EXPECT_EQ(t["num_kv_shared_layers"], 2);
  EXPECT_EQ(t["vocab_size"], 7);
  EXPECT_EQ(t["vocab_size_per_layer_input"], 6);  // unpadded: the table's own rows
  EXPECT_EQ(t["hidden_size_per_layer_input"], 2);
  EXPECT_EQ(t["sliding_window"], 4);
  EXPECT_EQ(t["rope_theta"].get<double>(), 1000000.0);
  EXPECT_EQ(t["rope_local_base_freq"].get<double>(), 10000.0);
  EXPECT_EQ(t["final_logit_softcapping"].get<double>(), 30.0);
  EXPECT_EQ(t["rms_norm_eps"].get<double>(), 1e-6);
  EXPECT_EQ(t["layer_types"], nlohmann::ordered_json({"sliding_attention", "sliding_attention", "full_attention",
                                                      "sliding_attention", "full_attention"}));
  EXPECT_EQ(t["activation_sparsity_pattern"], nlohmann::ordered_json({0.95, 0.95, 0.0, 0.0, 0.0}));
  EXPECT_EQ(t["altup_num_inputs"], 4);
  EXPECT_EQ(t["altup_active_idx"], 0);
  EXPECT_EQ(t["laurel_rank"], 4);
  EXPECT_EQ(t["altup_coef_clip"].get<double>(), 120.0);
  EXPECT_TRUE(t["altup_correct_scale"].get<bool>());
  EXPECT_TRUE(t["rope_scaling"].is_null());
  // What the file does not hold, said: the AltUp clip and output scale, nothing else here.
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_TRUE(has_note(notes, "altup_coef_clip = 120.0"));
  EXPECT_TRUE(has_note(notes, "altup_correct_scale = true"));
}

TEST(GgufGemma3n, ZeroPaddedPerLayerRowsGoBackToThePublishedVocabulary) {
  Layout l;
  l.per_layer_rows = 262400;  // llama.cpp pads to vocab_size with zero rows
  std::vector<std::string> notes;
  auto p = parse(gemma3n(l));
  auto c = config_of(p, &notes);
  EXPECT_EQ(c["text_config"]["vocab_size_per_layer_input"], 262144);
  EXPECT_TRUE(has_note(notes, "vocab_size_per_layer_input = 262144"));
  // The conversion keeps the first 262144 rows of the table.
  const auto* t = p.file.find_tensor("per_layer_token_embd.weight");
  auto plan = plan_tensor(find_architecture(p.file), p.file, *t);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->hf_name, "model.language_model.embed_tokens_per_layer.weight");
  keep_gemma3n_per_layer_rows(*plan, *t, c);
  ASSERT_EQ(plan->row_parts.size(), 1u);
  EXPECT_EQ(plan->row_parts[0].first, "model.language_model.embed_tokens_per_layer.weight");
  EXPECT_EQ(plan->row_parts[0].second, 262144u);
  // Rows past it that are not zeros are the model's own: kept, nothing assumed.
  l.nonzero_padding = true;
  notes.clear();
  auto own = parse(gemma3n(l));
  EXPECT_EQ(config_of(own, &notes)["text_config"]["vocab_size_per_layer_input"], 262400);
  EXPECT_FALSE(has_note(notes, "vocab_size_per_layer_input"));
}

TEST(GgufGemma3n, WhatOlderFilesLeaveOutIsLlamaCppsDefaultsAndSaid) {
  Layout l;
  l.window_pattern = l.swa_base = l.softcap = false;
  l.sliding = {};
  l.shared = 0;
  std::vector<std::string> notes;
  auto c = config_of(parse(gemma3n(l)), &notes);
  const auto& t = c["text_config"];
  EXPECT_EQ(t["layer_types"], nlohmann::ordered_json({"sliding_attention", "sliding_attention", "sliding_attention",
                                                      "sliding_attention", "full_attention"}));
  EXPECT_EQ(t["rope_local_base_freq"].get<double>(), 10000.0);
  EXPECT_EQ(t["final_logit_softcapping"].get<double>(), 30.0);
  EXPECT_TRUE(has_note(notes, "layer_types: every fifth layer full attention"));
  EXPECT_TRUE(has_note(notes, "rope_local_base_freq = 10000.0"));
  EXPECT_TRUE(has_note(notes, "final_logit_softcapping = 30.0"));
}

TEST(GgufGemma3n, TensorNames) {
  auto p = parse(gemma3n());
  const auto& arch = find_architecture(p.file);
  auto plan = [&](const char* name) { return plan_tensor(arch, p.file, *p.file.find_tensor(name)); };
  EXPECT_EQ(plan("token_embd.weight")->hf_name, "model.language_model.embed_tokens.weight");
  EXPECT_EQ(plan("blk.0.laurel_l.weight")->hf_name, "model.language_model.layers.0.laurel.linear_left.weight");
  // A parameter of the AltUp module itself, which llama.cpp named with ".weight".
  EXPECT_EQ(plan("blk.0.altup_correct_scale.weight")->hf_name, "model.language_model.layers.0.altup.correct_output_scale");
  EXPECT_TRUE(plan("blk.0.altup_correct_scale.weight")->narrow);
  EXPECT_FALSE(plan("blk.0.altup_correct_scale.weight")->minus_one);  // Gemma 3n's norms and scales have no +1
  EXPECT_EQ(plan("blk.0.altup_predict_coef.weight")->hf_name,
            "model.language_model.layers.0.altup.prediction_coefs.weight");
  auto stacked = plan("altup_unembd_proj.weight");
  ASSERT_EQ(stacked->row_parts.size(), 3u);
  EXPECT_EQ(stacked->row_parts[2].first, "model.language_model.altup_unembed_projections.2.weight");
  EXPECT_EQ(stacked->row_parts[2].second, 32u);
}

TEST(GgufGemma3n, StackedMatricesSliceAsTwoDimensionalParts) {
  auto p = parse(gemma3n());
  const auto* t = p.file.find_tensor("altup_proj.weight");
  auto part = slice_rows(*t, 64, 32);  // the third matrix
  EXPECT_EQ(part.dims, std::vector<uint64_t>({32, 32}));
  EXPECT_EQ(part.offset, t->offset + 64 * 32 * 2);
  EXPECT_EQ(part.n_bytes, 32u * 32 * 2);
  EXPECT_THROW(slice_rows(*t, 80, 32), mlxrt::UnsupportedError);
}

TEST(GgufGemma3n, WhatMlxLmCannotExpressIsRefused) {
  auto head = gemma3n();
  head.tensor("output.weight", {32, 7}, kF16, std::string(32 * 7 * 2, '\0'));
  auto p = parse(head);
  EXPECT_THROW(plan_tensor(find_architecture(p.file), p.file, *p.file.find_tensor("output.weight")),
               mlxrt::UnsupportedError);
  auto bias = gemma3n();
  bias.tensor("blk.0.attn_q.bias", {32}, kF32, std::string(32 * 4, '\0'));
  p = parse(bias);
  EXPECT_THROW(plan_tensor(find_architecture(p.file), p.file, *p.file.find_tensor("blk.0.attn_q.bias")),
               mlxrt::UnsupportedError);
  auto scaled = gemma3n();
  scaled.str("gemma3n.rope.scaling.type", "linear").f32("gemma3n.rope.scaling.factor", 8.0f);
  EXPECT_NE(error_of<mlxrt::UnsupportedError>(parse(scaled)).find("rope.scaling.type"), std::string::npos);
  Layout all_sliding;
  all_sliding.sliding = {1, 1, 1, 1, 1};
  EXPECT_NE(error_of<mlxrt::UnsupportedError>(parse(gemma3n(all_sliding))).find("full_attention"), std::string::npos);
  Layout orphan;  // layer 4 (full) shares keys, but the only full layer before it is shared too
  orphan.sliding = {1, 1, 1, 0, 0};
  EXPECT_NE(error_of<mlxrt::UnsupportedError>(parse(gemma3n(orphan))).find("layer 3 shares"), std::string::npos);
}

TEST(GgufGemma3n, BadMetadataIsNamed) {
  Layout nan;
  nan.sparsity[1] = NAN;
  EXPECT_NE(error_of<mlxrt::ConfigError>(parse(gemma3n(nan))).find("activation_sparsity_scale' entry 1"),
            std::string::npos);
  Layout short_list;
  short_list.sparsity = {-kInf};
  EXPECT_NE(error_of<mlxrt::ConfigError>(parse(gemma3n(short_list))).find("one entry per layer"), std::string::npos);
  Layout all_shared;
  all_shared.shared = 5;
  EXPECT_NE(error_of<mlxrt::ConfigError>(parse(gemma3n(all_shared))).find("shared_kv_layers"), std::string::npos);
  Layout two_stacked;  // four AltUp inputs need three stacked matrices
  two_stacked.stacked = 2;
  auto p = parse(gemma3n(two_stacked));
  EXPECT_THROW(plan_tensor(find_architecture(p.file), p.file, *p.file.find_tensor("altup_proj.weight")),
               mlxrt::WeightsError);
  GgufBuilder b;  // a file with only the architecture: the first required key is named
  b.str("general.architecture", "gemma3n");
  EXPECT_NE(error_of<mlxrt::ConfigError>(parse(b)).find("gemma3n.embedding_length"), std::string::npos);
}
