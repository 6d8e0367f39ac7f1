// The mixture-of-experts families: their profiles, the config keys their fingerprint covers, the
// routers' top-k spellings and the expert-count checks. Logits parity with mlx-lm is checked by
// tests/parity on the qwen3_moe_*, mixtral_*, qwen2_moe_*, olmoe_*, gpt_oss_* and phixtral_* fixtures.
#include <gtest/gtest.h>

#include <algorithm>

#include <mlx/ops.h>

#include "mlxrt/model/fingerprint.h"
#include "mlxrt/model/nn/moe.h"
#include "mlxrt/model/profile.h"
#include "mlxrt/model/registry.h"
#include "mlxrt/util/errors.h"

namespace mx = mlx::core;
using namespace mlxrt;
using namespace mlxrt::model;
using nlohmann::json;

TEST(Moe, EachFamilyResolvesToItsGraph) {
  const std::pair<const char*, Graph> families[] = {{"qwen3_moe", Graph::qwen3_moe},
                                                    {"mixtral", Graph::mixtral},
                                                    {"qwen2_moe", Graph::qwen2_moe},
                                                    {"olmoe", Graph::olmoe},
                                                    {"gpt_oss", Graph::gpt_oss},
                                                    {"phixtral", Graph::phixtral}};
  for (const auto& [type, graph] : families) {
    EXPECT_TRUE(graph_accepts(graph, type)) << type;
    const auto& entry = graph_entry(graph);
    EXPECT_EQ(entry.name, type);
    EXPECT_EQ(to_string(entry.capability), std::string(type) + "-graph");
    EXPECT_NE(std::find(engine_capabilities().begin(), engine_capabilities().end(), entry.capability),
              engine_capabilities().end())
        << type;
    EXPECT_EQ(to_string(graph), type);
    // A profile file may name the graph.
    json p = {{"id", "x"},
              {"fidelity", {{"tier", "l1"}, {"oracle", "mlx-lm"}, {"claim", "bit-exact"}}},
              {"required_capabilities", {"safetensors", "autoregressive", std::string(type) + "-graph"}},
              {"execution", {{"loader", "safetensors"}, {"graph", type}, {"loop", "autoregressive"},
                             {"specialization", "dedicated"}}}};
    EXPECT_EQ(profile_from_json(p, "p").execution.graph, graph) << type;
  }
  // The dense graphs do not run MoE model_types.
  EXPECT_FALSE(graph_accepts(Graph::qwen3, "qwen3_moe"));
  EXPECT_FALSE(graph_accepts(Graph::llama, "mixtral"));
  // mlx-lm runs phi-msft checkpoints through phixtral.py; Phi-2's graph does not run phixtral.
  EXPECT_TRUE(graph_accepts(Graph::phixtral, "phi-msft"));
  EXPECT_FALSE(graph_accepts(Graph::phi, "phixtral"));
}

TEST(Moe, FingerprintCoversPhixtralKeys) {
  json base = {{"model_type", "phixtral"}, {"num_vocab", 512}, {"model_dim", 128}, {"num_heads", 4},
               {"num_layers", 2}, {"rotary_dim", 16}, {"num_local_experts", 8}, {"num_experts_per_tok", 6}};
  const auto fp = config_fingerprint(base);
  for (const auto& [key, value] : base.items()) {
    json changed = base;
    changed[key] = key == "model_type" ? json("phi-msft") : json(3);
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}

TEST(Moe, FingerprintCoversTheExpertKeys) {
  json base = {{"model_type", "qwen3_moe"}, {"num_experts", 16}, {"num_experts_per_tok", 6},
               {"moe_intermediate_size", 64}, {"decoder_sparse_step", 1}, {"mlp_only_layers", json::array()},
               {"norm_topk_prob", true}, {"num_local_experts", 8}, {"shared_expert_intermediate_size", 128},
               {"enable_moe_block", true}, {"top_k_experts", 2}};
  const auto fp = config_fingerprint(base);
  for (const auto& [key, value] : base.items()) {
    json changed = base;
    changed[key] = value.is_boolean() ? json(!value.get<bool>()) : value.is_array() ? json({1}) : json(3);
    if (key == "model_type") changed[key] = "mixtral";
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}

TEST(Moe, TopKSpellingsPickTheLargest) {
  auto x = mx::array({0.1f, 0.7f, 0.3f, 0.9f, 0.2f, 0.5f}, {1, 6});
  for (auto how : {nn::TopK::partition_tail, nn::TopK::negated_head}) {
    auto idx = mx::sort(nn::top_k_indices(x, 3, how), -1);
    EXPECT_TRUE(mx::array_equal(idx, mx::array({1u, 3u, 5u}, {1, 3})).item<bool>());
  }
  // softmax then top-k with renormalisation: the scores sum to one.
  auto r = nn::route(x, 2, nn::RouterOrder::softmax_then_top_k, nn::TopK::partition_tail, true);
  EXPECT_NEAR(mx::sum(r.scores).item<float>(), 1.0f, 1e-6);
  // top-k then softmax: a softmax over the two largest logits.
  auto t = nn::route(x, 2, nn::RouterOrder::top_k_then_softmax, nn::TopK::negated_head);
  EXPECT_NEAR(mx::sum(t.scores).item<float>(), 1.0f, 1e-6);
}

TEST(Moe, ExpertCountsAreChecked) {
  EXPECT_NO_THROW(nn::check_expert_counts(8, 8, "num_experts", "c.json"));
  try {
    nn::check_expert_counts(8, 9, "num_local_experts", "c.json");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'num_experts_per_tok' is 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'num_local_experts' (8)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::check_expert_counts(8, 0, "num_experts", "c.json"), ConfigError);
  EXPECT_THROW(nn::check_expert_counts(0, 1, "num_experts", "c.json"), ConfigError);
}
