#include "mlxrt/model/registry.h"

#include <algorithm>
#include <map>

#include "mlxrt/model/families/families.h"

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
      // gemma4 (multimodal, and gemma4_unified, which mlx-lm remaps to it) runs its text model
      // through gemma4_text.py.
      {Graph::gemma4_text, "gemma4_text", Capability::gemma4_text_graph, {"gemma4_text", "gemma4", "gemma4_unified"},
       {}, gemma4_text::build},
      {Graph::gemma2, "gemma2", Capability::gemma2_graph, {"gemma2"}, {}, gemma2::build},
      {Graph::gemma, "gemma", Capability::gemma_graph, {"gemma"}, {}, gemma::build},
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

}  // namespace mlxrt::model
