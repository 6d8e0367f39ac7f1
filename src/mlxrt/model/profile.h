#pragma once
/** Model profiles: what a model is constructed with (loader, graph, loop) and the fidelity it
 * promises, resolved in this order: an exact artifact profile (HF snapshot fingerprint, guarded by
 * the config fingerprint), else the family profile, else the generic family, else a refusal.
 * Profiles decide construction only; sampling, KV scheme etc. are per request. */
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/io/model_config.h"

namespace mlxrt::model {

enum class Capability {
  safetensors,
  autoregressive,
  qwen3_graph,
  llama_graph,
  qwen2_graph,
  gemma3_text_graph,
  phi3_graph,
  qwen3_next_graph,
  qwen3_5_graph,
  recurrent_state,   // layers that carry an ArraysCache (conv and recurrent state), not trimmable
  hybrid_attention,  // linear-attention layers interleaved with full-attention ones
  mrope,             // reads multimodal RoPE sections (text positions rotate as a plain RoPE)
  qwen3_moe_graph,
  mixtral_graph,
  qwen2_moe_graph,
  olmoe_graph,
  gpt_oss_graph,
  mistral3_graph,
  ministral3_graph,
  smollm3_graph,
  gemma4_text_graph,
  olmo2_graph,
  olmo3_graph,
  granite_graph,
  minicpm_graph,
  exaone4_graph,
  glm4_graph,
  ernie4_5_graph,
  seed_oss_graph,
  hunyuan_v1_dense_graph,
  internlm3_graph,
  starcoder2_graph,
  stablelm_graph,
  phi_graph,
  helium_graph,
  cohere2_graph,
  gemma2_graph,
  gemma_graph,
  phixtral_graph,
  gemma3n_graph,
  lfm2_graph,
  minicpm3_graph,
};
enum class FidelityTier { l1, l2, l3 };
enum class Oracle { none, mlx_lm, mlx_whisper, mlx_optiq };
enum class Claim { bit_exact, measured };
enum class Loader { safetensors };
enum class Graph {
  qwen3,
  llama,
  qwen2,
  gemma3_text,
  phi3,
  qwen3_next,
  qwen3_5,
  qwen3_moe,
  mixtral,
  qwen2_moe,
  olmoe,
  gpt_oss,
  mistral3,
  ministral3,
  smollm3,
  gemma4_text,
  olmo2,
  olmo3,
  granite,
  minicpm,
  exaone4,
  glm4,
  ernie4_5,
  seed_oss,
  hunyuan_v1_dense,
  internlm3,
  starcoder2,
  stablelm,
  phi,
  helium,
  cohere2,
  gemma2,
  gemma,
  phixtral,
  gemma3n,
  lfm2,
  minicpm3,
};
enum class Loop { autoregressive };
enum class Specialization { artifact, dedicated, generic };

struct Fidelity {
  FidelityTier tier = FidelityTier::l1;
  Oracle oracle = Oracle::mlx_lm;
  Claim claim = Claim::bit_exact;
};

struct Execution {
  Loader loader = Loader::safetensors;
  Graph graph = Graph::llama;
  Loop loop = Loop::autoregressive;
  Specialization specialization = Specialization::dedicated;
  std::optional<std::string> implementation;  // engine-registered code, exact artifacts only
};

struct ModelProfile {
  std::string id;
  std::optional<std::string> artifact_fingerprint;  // exact identity; family profiles have none
  std::optional<std::string> config_fingerprint;    // structural guard for artifact_fingerprint
  Fidelity fidelity;
  std::vector<Capability> required_capabilities;
  Execution execution;
};

struct ResolvedProfile {
  ModelProfile profile;
  std::optional<std::string> artifact_fingerprint;
  std::string config_fingerprint;
  bool exact_artifact = false;
};

struct ResolveOptions {
  /** Overrides the identity read from the path (nullopt = read it; "" = no identity). */
  std::optional<std::string> artifact_fingerprint;
  /** Extra exact-artifact declarations (e.g. from --profile-file). */
  std::vector<ModelProfile> artifact_profiles;
  /** What the engine can execute; defaults to engine_capabilities(). */
  std::optional<std::vector<Capability>> capabilities;
};

/** The capabilities this build really implements. */
const std::vector<Capability>& engine_capabilities();

/** Throws ProfileError-style UnsupportedError when a profile is malformed (seed semantics). */
void validate_profile(const ModelProfile& profile);

ResolvedProfile resolve_profile(const io::ModelConfig& config, const ResolveOptions& options = {});

/** Re-checks a previously resolved profile against a config (the factory seam). */
void assert_resolved_profile(const io::ModelConfig& config, const ResolvedProfile& resolved);

/** Reads artifact profiles from a user JSON file: {"profiles": [...]} or a bare list. */
std::vector<ModelProfile> load_profile_file(const std::string& path);

nlohmann::json to_json(const ResolvedProfile& resolved);
nlohmann::json to_json(const ModelProfile& profile);
ModelProfile profile_from_json(const nlohmann::json& j, const std::string& where);

std::string to_string(Capability c);
std::string to_string(Graph g);

}  // namespace mlxrt::model
