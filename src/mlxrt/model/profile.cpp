// The profile semantics of the reference runtime's profile.ts, for this engine's graphs.
#include "mlxrt/model/profile.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "mlxrt/io/model_dir.h"
#include "mlxrt/model/fingerprint.h"
#include "mlxrt/model/registry.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::model {

using nlohmann::json;

namespace {

template <typename E>
struct Names {
  E value;
  const char* name;
};

const Names<Capability> kCapabilities[] = {
    {Capability::safetensors, "safetensors"},
    {Capability::autoregressive, "autoregressive"},
    {Capability::qwen3_graph, "qwen3-graph"},
    {Capability::llama_graph, "llama-graph"},
    {Capability::qwen2_graph, "qwen2-graph"},
    {Capability::gemma3_text_graph, "gemma3_text-graph"},
    {Capability::phi3_graph, "phi3-graph"},
    {Capability::qwen3_next_graph, "qwen3_next-graph"},
    {Capability::qwen3_5_graph, "qwen3_5-graph"},
    {Capability::recurrent_state, "recurrent-state"},
    {Capability::hybrid_attention, "hybrid-attention"},
    {Capability::mrope, "mrope"},
    {Capability::qwen3_moe_graph, "qwen3_moe-graph"},
    {Capability::mixtral_graph, "mixtral-graph"},
    {Capability::qwen2_moe_graph, "qwen2_moe-graph"},
    {Capability::olmoe_graph, "olmoe-graph"},
    {Capability::gpt_oss_graph, "gpt_oss-graph"},
    {Capability::mistral3_graph, "mistral3-graph"},
    {Capability::ministral3_graph, "ministral3-graph"},
    {Capability::smollm3_graph, "smollm3-graph"},
    {Capability::gemma4_text_graph, "gemma4_text-graph"},
    {Capability::olmo2_graph, "olmo2-graph"},
    {Capability::olmo3_graph, "olmo3-graph"},
    {Capability::granite_graph, "granite-graph"},
    {Capability::minicpm_graph, "minicpm-graph"},
    {Capability::exaone4_graph, "exaone4-graph"},
    {Capability::glm4_graph, "glm4-graph"},
    {Capability::ernie4_5_graph, "ernie4_5-graph"},
    {Capability::seed_oss_graph, "seed_oss-graph"},
    {Capability::hunyuan_v1_dense_graph, "hunyuan_v1_dense-graph"},
    {Capability::internlm3_graph, "internlm3-graph"},
    {Capability::starcoder2_graph, "starcoder2-graph"},
    {Capability::stablelm_graph, "stablelm-graph"},
    {Capability::phi_graph, "phi-graph"},
    {Capability::helium_graph, "helium-graph"},
    {Capability::cohere2_graph, "cohere2-graph"},
    {Capability::gemma2_graph, "gemma2-graph"},
    {Capability::gemma_graph, "gemma-graph"},
    {Capability::phixtral_graph, "phixtral-graph"},
    {Capability::gemma3n_graph, "gemma3n-graph"},
    {Capability::lfm2_graph, "lfm2-graph"},
    {Capability::minicpm3_graph, "minicpm3-graph"},
};
const Names<FidelityTier> kTiers[] = {{FidelityTier::l1, "l1"}, {FidelityTier::l2, "l2"}, {FidelityTier::l3, "l3"}};
const Names<Oracle> kOracles[] = {
    {Oracle::mlx_lm, "mlx-lm"}, {Oracle::mlx_whisper, "mlx-whisper"}, {Oracle::mlx_optiq, "mlx-optiq"}};
const Names<Claim> kClaims[] = {{Claim::bit_exact, "bit-exact"}, {Claim::measured, "measured"}};
const Names<Loader> kLoaders[] = {{Loader::safetensors, "safetensors"}};
const Names<Graph> kGraphs[] = {{Graph::qwen3, "qwen3"}, {Graph::llama, "llama"}, {Graph::qwen2, "qwen2"},
                                {Graph::gemma3_text, "gemma3_text"}, {Graph::phi3, "phi3"},
                                {Graph::qwen3_next, "qwen3_next"},
                                {Graph::qwen3_5, "qwen3_5"},
                                {Graph::qwen3_moe, "qwen3_moe"},
                                {Graph::mixtral, "mixtral"},
                                {Graph::qwen2_moe, "qwen2_moe"},
                                {Graph::olmoe, "olmoe"},
                                {Graph::gpt_oss, "gpt_oss"},
                                {Graph::mistral3, "mistral3"},
                                {Graph::ministral3, "ministral3"},
                                {Graph::smollm3, "smollm3"},
                                {Graph::gemma4_text, "gemma4_text"},
                                {Graph::olmo2, "olmo2"},
                                {Graph::olmo3, "olmo3"},
                                {Graph::granite, "granite"},
                                {Graph::minicpm, "minicpm"},
                                {Graph::exaone4, "exaone4"},
                                {Graph::glm4, "glm4"},
                                {Graph::ernie4_5, "ernie4_5"},
                                {Graph::seed_oss, "seed_oss"},
                                {Graph::hunyuan_v1_dense, "hunyuan_v1_dense"},
                                {Graph::internlm3, "internlm3"},
                                {Graph::starcoder2, "starcoder2"},
                                {Graph::stablelm, "stablelm"},
                                {Graph::phi, "phi"},
                                {Graph::helium, "helium"},
                                {Graph::cohere2, "cohere2"},
                                {Graph::gemma2, "gemma2"}, {Graph::gemma, "gemma"},
                                {Graph::phixtral, "phixtral"},
                                {Graph::gemma3n, "gemma3n"},
                                {Graph::lfm2, "lfm2"},
                                {Graph::minicpm3, "minicpm3"}};
const Names<Loop> kLoops[] = {{Loop::autoregressive, "autoregressive"}};
const Names<Specialization> kSpecs[] = {{Specialization::artifact, "artifact"},
                                        {Specialization::dedicated, "dedicated"},
                                        {Specialization::generic, "generic"}};

template <typename E, size_t N>
std::string name_of(const Names<E> (&table)[N], E v) {
  for (const auto& e : table)
    if (e.value == v) return e.name;
  return "?";
}

template <typename E, size_t N>
E parse_enum(const Names<E> (&table)[N], const json& j, const std::string& where) {
  std::string all;
  for (const auto& e : table) all += std::string(all.empty() ? "" : ", ") + e.name;
  if (!j.is_string()) throw ConfigError(where + " must be a string (one of: " + all + ")");
  for (const auto& e : table)
    if (j.get<std::string>() == e.name) return e.value;
  throw ConfigError(where + ": unknown value \"" + j.get<std::string>() + "\" (expected one of: " + all + ")");
}

const Fidelity kL1{FidelityTier::l1, Oracle::mlx_lm, Claim::bit_exact};

ModelProfile family(const std::string& id, Graph graph, Specialization spec) {
  ModelProfile p;
  p.id = id;
  p.fidelity = kL1;
  p.execution = {Loader::safetensors, graph, Loop::autoregressive, spec, std::nullopt};
  p.required_capabilities = {Capability::safetensors, Capability::autoregressive, graph_entry(graph).capability};
  const auto& features = graph_entry(graph).features;
  p.required_capabilities.insert(p.required_capabilities.end(), features.begin(), features.end());
  return p;
}

// The engine's family profiles; a model_type is served by the first that accepts it.
ModelProfile family_profile(const io::ModelConfig& config) {
  const std::string& type = config.model_type();
  for (const auto& entry : graph_registry()) {
    if (std::find(entry.model_types.begin(), entry.model_types.end(), type) != entry.model_types.end())
      return family(entry.name + "-dedicated", entry.graph, Specialization::dedicated);
  }
  for (const auto& entry : graph_registry()) {
    if (std::find(entry.generic_types.begin(), entry.generic_types.end(), type) != entry.generic_types.end())
      return family("universal-dense", entry.graph, Specialization::generic);
  }
  std::vector<std::string> dedicated, generic;
  for (const auto& entry : graph_registry()) {
    dedicated.insert(dedicated.end(), entry.model_types.begin(), entry.model_types.end());
    generic.insert(generic.end(), entry.generic_types.begin(), entry.generic_types.end());
  }
  std::sort(dedicated.begin(), dedicated.end());
  std::sort(generic.begin(), generic.end());
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : ", ") + e;
    return s;
  };
  std::string arch = mlx_lm_remap(type);
  throw UnsupportedError(config.source() + ": unsupported model_type \"" + type + "\"" +
                         (arch != type ? " (mlx-lm remaps it to \"" + arch + "\")" : std::string()) +
                         " — supported: " + join(dedicated) + "; generic: " + join(generic));
}

std::vector<Capability> execution_capabilities(const ModelProfile& p) {
  std::vector<Capability> caps = {Capability::safetensors, Capability::autoregressive,
                                  graph_entry(p.execution.graph).capability};
  const auto& features = graph_entry(p.execution.graph).features;
  caps.insert(caps.end(), features.begin(), features.end());
  return caps;
}

}  // namespace

std::string to_string(Capability c) { return name_of(kCapabilities, c); }
std::string to_string(Graph g) { return name_of(kGraphs, g); }

const std::vector<Capability>& engine_capabilities() {
  static const std::vector<Capability> caps = {Capability::safetensors, Capability::autoregressive,
                                               Capability::qwen3_graph, Capability::llama_graph,
                                               Capability::qwen2_graph, Capability::gemma3_text_graph,
                                               Capability::phi3_graph,
                                               Capability::qwen3_next_graph,
                                               Capability::qwen3_5_graph,
                                               Capability::recurrent_state,
                                               Capability::hybrid_attention,
                                               Capability::mrope,
                                               Capability::qwen3_moe_graph,
                                               Capability::mixtral_graph,
                                               Capability::qwen2_moe_graph,
                                               Capability::olmoe_graph,
                                               Capability::gpt_oss_graph,
                                               Capability::mistral3_graph,
                                               Capability::ministral3_graph,
                                               Capability::smollm3_graph,
                                               Capability::gemma4_text_graph,
                                               Capability::olmo2_graph,
                                               Capability::olmo3_graph,
                                               Capability::granite_graph,
                                               Capability::minicpm_graph,
                                               Capability::exaone4_graph,
                                               Capability::glm4_graph,
                                               Capability::ernie4_5_graph,
                                               Capability::seed_oss_graph,
                                               Capability::hunyuan_v1_dense_graph,
                                               Capability::internlm3_graph,
                                               Capability::starcoder2_graph,
                                               Capability::stablelm_graph,
                                               Capability::phi_graph,
                                               Capability::helium_graph,
                                               Capability::cohere2_graph,
                                               Capability::gemma2_graph, Capability::gemma_graph,
                                               Capability::phixtral_graph,
                                               Capability::gemma3n_graph,
                                               Capability::lfm2_graph,
                                               Capability::minicpm3_graph};
  return caps;
}

void validate_profile(const ModelProfile& p) {
  if (p.id.empty()) throw UnsupportedError("model profile id must not be empty");
  if (p.execution.implementation) {
    bool blank = p.execution.implementation->find_first_not_of(" \t\n") == std::string::npos;
    if (blank || !p.artifact_fingerprint || p.execution.specialization != Specialization::artifact)
      throw UnsupportedError("model profile " + p.id + " must bind a named implementation to an exact artifact");
    // Model files never supply code: a named implementation must be registered in the engine,
    // and this build registers none.
    throw UnsupportedError("model profile " + p.id + " names implementation \"" + *p.execution.implementation +
                           "\", which this engine does not register");
  }
  if (p.artifact_fingerprint.has_value() != p.config_fingerprint.has_value())
    throw UnsupportedError("model profile " + p.id +
                           " must declare artifact_fingerprint and config_fingerprint together");
  const auto& f = p.fidelity;
  bool fidelity_ok =
      (f.tier == FidelityTier::l1 && f.oracle == Oracle::mlx_lm && f.claim == Claim::bit_exact) ||
      (f.tier == FidelityTier::l2 && f.oracle == Oracle::mlx_optiq && f.claim == Claim::bit_exact) ||
      (f.tier == FidelityTier::l3 && f.oracle == Oracle::none && f.claim == Claim::measured);
  // l1 against mlx-whisper is only valid for a whisper graph, which this engine does not have.
  if (!fidelity_ok) throw UnsupportedError("model profile " + p.id + " has an invalid fidelity contract");
  if (p.execution.loader != Loader::safetensors || p.execution.loop != Loop::autoregressive)
    throw UnsupportedError("model profile " + p.id + " has an invalid execution composition for " +
                           to_string(p.execution.graph));
  std::set<Capability> declared(p.required_capabilities.begin(), p.required_capabilities.end());
  std::string under;
  for (auto c : execution_capabilities(p))
    if (!declared.count(c)) under += (under.empty() ? "" : ", ") + to_string(c);
  if (!under.empty())
    throw UnsupportedError("model profile " + p.id + " does not declare execution capabilities: " + under);
}

ResolvedProfile resolve_profile(const io::ModelConfig& config, const ResolveOptions& options) {
  ResolvedProfile out;
  out.config_fingerprint = config_fingerprint(config.raw());
  if (options.artifact_fingerprint) {
    if (!options.artifact_fingerprint->empty()) out.artifact_fingerprint = options.artifact_fingerprint;
  } else {
    out.artifact_fingerprint = io::external_artifact_fingerprint(config.dir());
  }
  const auto& capabilities = options.capabilities ? *options.capabilities : engine_capabilities();

  std::optional<ModelProfile> chosen;
  if (out.artifact_fingerprint) {
    std::vector<const ModelProfile*> matches;
    for (const auto& p : options.artifact_profiles) {
      validate_profile(p);
      if (p.artifact_fingerprint == out.artifact_fingerprint) matches.push_back(&p);
    }
    if (matches.size() > 1)
      throw UnsupportedError("multiple model profiles declare artifact " + *out.artifact_fingerprint);
    if (!matches.empty()) {
      const ModelProfile& p = *matches.front();
      out.exact_artifact = true;
      if (*p.config_fingerprint != out.config_fingerprint)
        throw UnsupportedError("model profile " + p.id + " matched artifact " + *out.artifact_fingerprint +
                               ", but config fingerprint " + out.config_fingerprint + " != declared " +
                               *p.config_fingerprint + "; refusing to fall back");
      if (!graph_accepts(p.execution.graph, config.model_type()))
        throw UnsupportedError("model profile " + p.id + " selects " + to_string(p.execution.graph) +
                               ", which is incompatible with " + config.model_type() + "; refusing to fall back");
      chosen = p;
    }
  }
  if (!chosen) chosen = family_profile(config);
  validate_profile(*chosen);

  std::string missing;
  for (auto c : chosen->required_capabilities)
    if (std::find(capabilities.begin(), capabilities.end(), c) == capabilities.end())
      missing += (missing.empty() ? "" : ", ") + to_string(c);
  if (!missing.empty())
    throw UnsupportedError("model profile " + chosen->id + " requires missing engine capabilities: " + missing +
                           "; refusing to fall back");
  out.profile = *chosen;
  return out;
}

void assert_resolved_profile(const io::ModelConfig& config, const ResolvedProfile& r) {
  validate_profile(r.profile);
  std::string fp = config_fingerprint(config.raw());
  if (r.config_fingerprint != fp)
    throw UnsupportedError("model profile " + r.profile.id + " was resolved for config " + r.config_fingerprint +
                           ", not " + fp);
  if (!graph_accepts(r.profile.execution.graph, config.model_type()))
    throw UnsupportedError("model profile " + r.profile.id + " selects " + to_string(r.profile.execution.graph) +
                           ", which is incompatible with " + config.model_type());
  if (r.exact_artifact != r.profile.artifact_fingerprint.has_value() ||
      (r.exact_artifact &&
       (r.profile.artifact_fingerprint != r.artifact_fingerprint || r.profile.config_fingerprint != fp)))
    throw UnsupportedError("model profile " + r.profile.id + " does not match artifact " +
                           r.artifact_fingerprint.value_or("<unidentified>"));
}

ModelProfile profile_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw ConfigError(where + " must be an object");
  auto str = [&](const json& o, const char* key, const std::string& at) -> std::string {
    if (!o.contains(key) || !o[key].is_string()) throw ConfigError(at + "." + key + " must be a string");
    return o[key].get<std::string>();
  };
  ModelProfile p;
  p.id = str(j, "id", where);
  if (j.contains("artifact_fingerprint")) p.artifact_fingerprint = str(j, "artifact_fingerprint", where);
  if (j.contains("config_fingerprint")) p.config_fingerprint = str(j, "config_fingerprint", where);
  if (!j.contains("fidelity") || !j["fidelity"].is_object()) throw ConfigError(where + ".fidelity must be an object");
  const json& f = j["fidelity"];
  p.fidelity.tier = parse_enum(kTiers, f.value("tier", json()), where + ".fidelity.tier");
  p.fidelity.oracle = f.contains("oracle") && f["oracle"].is_null()
                          ? Oracle::none
                          : parse_enum(kOracles, f.value("oracle", json()), where + ".fidelity.oracle");
  p.fidelity.claim = parse_enum(kClaims, f.value("claim", json()), where + ".fidelity.claim");
  if (!j.contains("required_capabilities") || !j["required_capabilities"].is_array())
    throw ConfigError(where + ".required_capabilities must be a list");
  for (const auto& c : j["required_capabilities"])
    p.required_capabilities.push_back(parse_enum(kCapabilities, c, where + ".required_capabilities[]"));
  if (!j.contains("execution") || !j["execution"].is_object()) throw ConfigError(where + ".execution must be an object");
  const json& e = j["execution"];
  const std::string at = where + ".execution";
  p.execution.loader = parse_enum(kLoaders, e.value("loader", json()), at + ".loader");
  p.execution.graph = parse_enum(kGraphs, e.value("graph", json()), at + ".graph");
  p.execution.loop = parse_enum(kLoops, e.value("loop", json()), at + ".loop");
  p.execution.specialization = parse_enum(kSpecs, e.value("specialization", json()), at + ".specialization");
  if (e.contains("implementation")) p.execution.implementation = str(e, "implementation", at);
  return p;
}

std::vector<ModelProfile> load_profile_file(const std::string& path) {
  json j = read_json_file(path);
  const json* list = &j;
  if (j.is_object()) {
    if (!j.contains("profiles")) throw ConfigError(path + ": expected {\"profiles\": [...]} or a list");
    list = &j["profiles"];
  }
  if (!list->is_array()) throw ConfigError(path + ": 'profiles' must be a list");
  std::vector<ModelProfile> out;
  for (size_t i = 0; i < list->size(); ++i) {
    auto p = profile_from_json((*list)[i], path + ": profiles[" + std::to_string(i) + "]");
    if (!p.artifact_fingerprint || !p.config_fingerprint)
      throw ConfigError(path + ": profiles[" + std::to_string(i) +
                        "] must declare artifact_fingerprint and config_fingerprint (only exact artifacts can be added)");
    validate_profile(p);
    out.push_back(std::move(p));
  }
  return out;
}

json to_json(const ModelProfile& p) {
  json j;
  j["id"] = p.id;
  if (p.artifact_fingerprint) j["artifact_fingerprint"] = *p.artifact_fingerprint;
  if (p.config_fingerprint) j["config_fingerprint"] = *p.config_fingerprint;
  j["fidelity"] = {{"tier", name_of(kTiers, p.fidelity.tier)},
                   {"oracle", p.fidelity.oracle == Oracle::none ? json() : json(name_of(kOracles, p.fidelity.oracle))},
                   {"claim", name_of(kClaims, p.fidelity.claim)}};
  json caps = json::array();
  for (auto c : p.required_capabilities) caps.push_back(to_string(c));
  j["required_capabilities"] = caps;
  j["execution"] = {{"loader", name_of(kLoaders, p.execution.loader)},
                    {"graph", name_of(kGraphs, p.execution.graph)},
                    {"loop", name_of(kLoops, p.execution.loop)},
                    {"specialization", name_of(kSpecs, p.execution.specialization)}};
  if (p.execution.implementation) j["execution"]["implementation"] = *p.execution.implementation;
  return j;
}

json to_json(const ResolvedProfile& r) {
  return {{"profile", to_json(r.profile)},
          {"artifact", {{"fingerprint", r.artifact_fingerprint ? json(*r.artifact_fingerprint) : json()},
                        {"config_fingerprint", r.config_fingerprint}}},
          {"exact_artifact", r.exact_artifact}};
}

}  // namespace mlxrt::model
