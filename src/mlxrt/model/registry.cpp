#include "mlxrt/model/registry.h"

#include <algorithm>
#include <map>

#include "mlxrt/model/families/families.h"
#include "mlxrt/model/families/minicpm3.h"

namespace mlxrt::model {

const std::vector<GraphEntry>& graph_registry() {
  static const std::vector<GraphEntry> registry = {
      {Graph::qwen3, "qwen3", Capability::qwen3_graph, {"qwen3"}, {}, qwen3::build},
      {Graph::qwen2, "qwen2", Capability::qwen2_graph, {"qwen2"}, {}, qwen2::build},
      // mlx-lm maps these model_types onto llama.py.
      {Graph::llama, "llama", Capability::llama_graph, {"llama"}, {"iquestcoder", "mistral", "xverse"},
       llama::build},
      {Graph::phi3, "phi3", Capability::phi3_graph, {"phi3"}, {}, phi3::build},
      // gemma3 (multimodal) runs its text model through gemma3_text.py in mlx-lm.
      {Graph::gemma3_text, "gemma3_text", Capability::gemma3_text_graph, {"gemma3_text", "gemma3"}, {},
       gemma3_text::build},
      // Hybrid gated-delta / full-attention decoders with recurrent state.
      {Graph::qwen3_next, "qwen3_next", Capability::qwen3_next_graph, {"qwen3_next"}, {}, qwen3_next::build,
       {Capability::recurrent_state, Capability::hybrid_attention}},
      {Graph::qwen3_5, "qwen3_5", Capability::qwen3_5_graph, {"qwen3_5", "qwen3_5_moe"}, {}, qwen3_5::build,
       {Capability::recurrent_state, Capability::hybrid_attention, Capability::mrope}},
      {Graph::qwen3_moe, "qwen3_moe", Capability::qwen3_moe_graph, {"qwen3_moe"}, {}, qwen3_moe::build},
      {Graph::mixtral, "mixtral", Capability::mixtral_graph, {"mixtral"}, {}, mixtral::build},
      {Graph::qwen2_moe, "qwen2_moe", Capability::qwen2_moe_graph, {"qwen2_moe"}, {}, qwen2_moe::build},
      {Graph::olmoe, "olmoe", Capability::olmoe_graph, {"olmoe"}, {}, olmoe::build},
      {Graph::gpt_oss, "gpt_oss", Capability::gpt_oss_graph, {"gpt_oss"}, {}, gpt_oss::build},
      // mlx-lm remaps llava onto mistral3.py.
      {Graph::mistral3, "mistral3", Capability::mistral3_graph, {"mistral3"}, {"llava"}, mistral3::build},
      {Graph::ministral3, "ministral3", Capability::ministral3_graph, {"ministral3"}, {}, ministral3::build},
      {Graph::smollm3, "smollm3", Capability::smollm3_graph, {"smollm3"}, {}, smollm3::build},
      // gemma4 (multimodal, and gemma4_unified, which mlx-lm remaps to it) runs its text model
      // through gemma4_text.py.
      {Graph::gemma4_text, "gemma4_text", Capability::gemma4_text_graph, {"gemma4_text", "gemma4", "gemma4_unified"},
       {}, gemma4_text::build},
      {Graph::olmo2, "olmo2", Capability::olmo2_graph, {"olmo2"}, {}, olmo2::build},
      {Graph::olmo3, "olmo3", Capability::olmo3_graph, {"olmo3"}, {}, olmo3::build},
      {Graph::granite, "granite", Capability::granite_graph, {"granite"}, {}, granite::build},
      {Graph::minicpm, "minicpm", Capability::minicpm_graph, {"minicpm"}, {}, minicpm::build},
      {Graph::exaone4, "exaone4", Capability::exaone4_graph, {"exaone4"}, {}, exaone4::build},
      {Graph::glm4, "glm4", Capability::glm4_graph, {"glm4"}, {}, glm4::build},
      {Graph::ernie4_5, "ernie4_5", Capability::ernie4_5_graph, {"ernie4_5"}, {}, ernie4_5::build},
      {Graph::seed_oss, "seed_oss", Capability::seed_oss_graph, {"seed_oss"}, {}, seed_oss::build},
      {Graph::hunyuan_v1_dense, "hunyuan_v1_dense", Capability::hunyuan_v1_dense_graph, {"hunyuan_v1_dense"}, {}, hunyuan_v1_dense::build},
      {Graph::internlm3, "internlm3", Capability::internlm3_graph, {"internlm3"}, {}, internlm3::build},
      {Graph::starcoder2, "starcoder2", Capability::starcoder2_graph, {"starcoder2"}, {}, starcoder2::build},
      {Graph::stablelm, "stablelm", Capability::stablelm_graph, {"stablelm"}, {}, stablelm::build},
      {Graph::phi, "phi", Capability::phi_graph, {"phi"}, {}, phi::build},
      {Graph::helium, "helium", Capability::helium_graph, {"helium"}, {}, helium::build},
      {Graph::cohere2, "cohere2", Capability::cohere2_graph, {"cohere2"}, {}, cohere2::build},
      {Graph::gemma2, "gemma2", Capability::gemma2_graph, {"gemma2"}, {}, gemma2::build},
      {Graph::gemma, "gemma", Capability::gemma_graph, {"gemma"}, {}, gemma::build},
      // mlx-lm remaps phi-msft onto phixtral.py.
      {Graph::phixtral, "phixtral", Capability::phixtral_graph, {"phixtral"}, {"phi-msft"}, phixtral::build},
      // gemma3n: the text model of a Gemma 3n checkpoint (mlx-lm loads no tower).
      {Graph::gemma3n, "gemma3n", Capability::gemma3n_graph, {"gemma3n"}, {}, gemma3n::build},
      {Graph::lfm2, "lfm2", Capability::lfm2_graph, {"lfm2"}, {}, lfm2::build,
       {Capability::recurrent_state, Capability::hybrid_attention}},
      {Graph::minicpm3, "minicpm3", Capability::minicpm3_graph, {"minicpm3"}, {}, minicpm3::build},
  };
  return registry;
}

const GraphEntry& graph_entry(Graph graph) {
  for (const auto& e : graph_registry())
    if (e.graph == graph) return e;
  throw UnsupportedError("no graph registered for " + to_string(graph));
}

std::string mlx_lm_remap(const std::string& model_type) {
  static const std::map<std::string, std::string> remap = {
      {"mistral", "llama"},         {"llava", "mistral3"},        {"phi-msft", "phixtral"},
      {"falcon_mamba", "mamba"},    {"joyai_llm_flash", "deepseek_v3"}, {"kimi_k2", "deepseek_v3"},
      {"qwen2_5_vl", "qwen2_vl"},   {"minimax_m2", "minimax"},    {"iquestcoder", "llama"},
      {"xverse", "llama"},          {"gemma4_unified", "gemma4"}, {"deepseek_v41_text", "deepseek_v41"},
  };
  auto it = remap.find(model_type);
  return it == remap.end() ? model_type : it->second;
}

bool graph_accepts(Graph graph, const std::string& model_type) {
  const auto& e = graph_entry(graph);
  auto has = [&](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), model_type) != v.end();
  };
  return has(e.model_types) || has(e.generic_types);
}

namespace {

// mlx-lm 0.32.2: llama.py, qwen2.py, qwen3.py, qwen3_moe.py, ministral3.py, gpt_oss.py and qwen3_5.py
// (qwen3_5_moe.py inherits it) define shard(); qwen2.py, qwen3_moe.py, qwen3_5.py and qwen3_next.py
// build their model as a PipelineMixin. (Other mlx-lm files shard too; their graphs here do not yet.)
constexpr Graph kSharded[] = {Graph::llama, Graph::qwen2, Graph::qwen3, Graph::qwen3_moe, Graph::ministral3,
                              Graph::gpt_oss, Graph::qwen3_5};
constexpr Graph kPipelined[] = {Graph::qwen2, Graph::qwen3_moe, Graph::qwen3_5, Graph::qwen3_next};

}  // namespace

bool graph_shards(Graph graph) { return std::find(std::begin(kSharded), std::end(kSharded), graph) != std::end(kSharded); }

bool graph_pipelines(Graph graph) {
  return std::find(std::begin(kPipelined), std::end(kPipelined), graph) != std::end(kPipelined);
}

std::string sharded_graph_names(bool pipeline) {
  std::string out;
  for (const auto& e : graph_registry())
    if (pipeline ? graph_pipelines(e.graph) : graph_shards(e.graph)) out += (out.empty() ? "" : ", ") + e.name;
  return out;
}

}  // namespace mlxrt::model
