#include "mlxrt/model/profile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "mlxrt/io/model_dir.h"
#include "mlxrt/model/fingerprint.h"
#include "mlxrt/util/errors.h"

namespace fs = std::filesystem;
using namespace mlxrt;
using namespace mlxrt::model;
using nlohmann::json;

namespace {

json qwen3_config() {
  return {{"model_type", "qwen3"}, {"hidden_size", 128}, {"num_hidden_layers", 2}, {"intermediate_size", 256},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 32}, {"vocab_size", 512},
          {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"tie_word_embeddings", true},
          {"max_position_embeddings", 4096}};
}

class TempModel {
 public:
  explicit TempModel(const fs::path& dir, const json& config) : dir_(dir) {
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << config.dump();
  }
  ~TempModel() { fs::remove_all(root()); }
  const fs::path& dir() const { return dir_; }
  io::ModelConfig load() const { return io::ModelConfig::load(dir_); }

 private:
  fs::path root() const { return dir_.parent_path().parent_path().parent_path(); }
  fs::path dir_;
};

fs::path temp_root(const std::string& name) {
  return fs::temp_directory_path() / ("mlxrt_profile_test_" + name + "_" + std::to_string(::getpid()));
}

const char* kSha = "0123456789abcdef0123456789abcdef01234567";

fs::path snapshot_dir(const fs::path& root) {
  return root / "hub" / "models--org--tiny" / "snapshots" / kSha;
}

ModelProfile artifact_profile(const std::string& config_fp) {
  ModelProfile p;
  p.id = "tiny-exact";
  p.artifact_fingerprint = std::string("hf:org/tiny@") + kSha;
  p.config_fingerprint = config_fp;
  p.execution.graph = Graph::qwen3;
  p.execution.specialization = Specialization::artifact;
  p.required_capabilities = {Capability::safetensors, Capability::autoregressive, Capability::qwen3_graph};
  return p;
}

}  // namespace

TEST(ArtifactFingerprint, OnlyHfSnapshotsHaveOne) {
  EXPECT_EQ(io::external_artifact_fingerprint("/x/models--org--name/snapshots/" + std::string(kSha)),
            std::string("hf:org/name@") + kSha);
  EXPECT_EQ(io::external_artifact_fingerprint("/x/models--org--name/snapshots/ABCDEF0123456789ABCDEF0123456789ABCDEF01/"),
            "hf:org/name@abcdef0123456789abcdef0123456789abcdef01");
  EXPECT_EQ(io::external_artifact_fingerprint("/x/models--org--name/snapshots/main"), std::nullopt);
  EXPECT_EQ(io::external_artifact_fingerprint("/some/local/model"), std::nullopt);
  EXPECT_EQ(io::external_artifact_fingerprint("/x/models--noseparator/snapshots/" + std::string(kSha)), std::nullopt);
}

TEST(ArtifactFingerprint, RelocationKeepsIdentity) {
  auto a = io::external_artifact_fingerprint("/home/a/.cache/huggingface/hub/models--org--m/snapshots/" + std::string(kSha));
  auto b = io::external_artifact_fingerprint("/mnt/disk/hub/models--org--m/snapshots/" + std::string(kSha));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a, b);
  TempModel m1(snapshot_dir(temp_root("reloc1")), qwen3_config());
  TempModel m2(snapshot_dir(temp_root("reloc2")), qwen3_config());
  auto r1 = resolve_profile(m1.load()), r2 = resolve_profile(m2.load());
  EXPECT_EQ(r1.artifact_fingerprint, r2.artifact_fingerprint);
  EXPECT_EQ(r1.config_fingerprint, r2.config_fingerprint);
}

TEST(ConfigFingerprint, ArchitectureFieldsOnly) {
  json c = qwen3_config();
  std::string fp = config_fingerprint(c);
  EXPECT_EQ(fp.size(), 16u);
  json reordered = json::parse(R"({"vocab_size":512,"model_type":"qwen3"})");
  json c2 = c;
  c2["eos_token_id"] = 7;                   // not architecture
  c2["transformers_version"] = "9.9";
  EXPECT_EQ(config_fingerprint(c2), fp);
  c2["rope_theta"] = 10000;                 // integral float written as int: same value
  EXPECT_EQ(config_fingerprint(c2), fp);
  c2["hidden_size"] = 256;
  EXPECT_NE(config_fingerprint(c2), fp);
  EXPECT_EQ(canonical_architecture_json(reordered), R"({"model_type":"qwen3","vocab_size":512})");
}

TEST(Profile, FamilyThenGenericThenRefusal) {
  TempModel q(temp_root("fam") / "a" / "b" / "q", qwen3_config());
  auto r = resolve_profile(q.load());
  EXPECT_EQ(r.profile.id, "qwen3-dedicated");
  EXPECT_FALSE(r.exact_artifact);
  EXPECT_EQ(r.artifact_fingerprint, std::nullopt);

  json mistral = qwen3_config();
  mistral["model_type"] = "mistral";
  TempModel m(temp_root("gen") / "a" / "b" / "m", mistral);
  auto g = resolve_profile(m.load());
  EXPECT_EQ(g.profile.id, "universal-dense");
  EXPECT_EQ(g.profile.execution.graph, Graph::llama);
  EXPECT_EQ(g.profile.execution.specialization, Specialization::generic);

  json unknown = qwen3_config();
  unknown["model_type"] = "falcon_mamba";
  TempModel u(temp_root("unk") / "a" / "b" / "u", unknown);
  try {
    resolve_profile(u.load());
    FAIL();
  } catch (const UnsupportedError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unsupported model_type \"falcon_mamba\" (mlx-lm remaps it to \"mamba\")"), std::string::npos)
        << msg;
    // Sorted names: the dedicated families, then the generic model_types.
    for (const char* name : {"supported: ", " gemma3_text, ", " llama, ", " qwen3", "; generic: "})
      EXPECT_NE(msg.find(name), std::string::npos) << name << " in " << msg;
    EXPECT_NE(msg.find(" iquestcoder, llava, mistral, phi-msft, xverse"), std::string::npos) << msg;
  }
}

TEST(Profile, ExactArtifactMatchesAndGuards) {
  auto root = temp_root("exact");
  TempModel m(snapshot_dir(root), qwen3_config());
  auto config = m.load();
  std::string fp = config_fingerprint(config.raw());
  ResolveOptions options;
  options.artifact_profiles = {artifact_profile(fp)};
  auto r = resolve_profile(config, options);
  EXPECT_TRUE(r.exact_artifact);
  EXPECT_EQ(r.profile.id, "tiny-exact");
  EXPECT_NO_THROW(assert_resolved_profile(config, r));

  options.artifact_profiles = {artifact_profile("ffffffffffffffff")};
  try {
    resolve_profile(config, options);
    FAIL();
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to fall back"), std::string::npos);
  }

  auto wrong_graph = artifact_profile(fp);
  wrong_graph.execution.graph = Graph::llama;
  wrong_graph.required_capabilities.push_back(Capability::llama_graph);
  options.artifact_profiles = {wrong_graph};
  EXPECT_THROW(resolve_profile(config, options), UnsupportedError);

  options.artifact_profiles = {artifact_profile(fp), artifact_profile(fp)};
  EXPECT_THROW(resolve_profile(config, options), UnsupportedError);
}

TEST(Profile, CapabilityGating) {
  TempModel q(temp_root("caps") / "a" / "b" / "q", qwen3_config());
  ResolveOptions options;
  options.capabilities = std::vector<Capability>{Capability::safetensors, Capability::autoregressive};
  try {
    resolve_profile(q.load(), options);
    FAIL();
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("requires missing engine capabilities: qwen3-graph; refusing to fall back"),
              std::string::npos)
        << e.what();
  }
}

TEST(Profile, Validation) {
  auto p = artifact_profile("0000000000000000");
  EXPECT_NO_THROW(validate_profile(p));
  auto bad = p;
  bad.id = "";
  EXPECT_THROW(validate_profile(bad), UnsupportedError);
  bad = p;
  bad.config_fingerprint.reset();
  EXPECT_THROW(validate_profile(bad), UnsupportedError);
  bad = p;
  bad.fidelity = {FidelityTier::l1, Oracle::mlx_optiq, Claim::bit_exact};
  EXPECT_THROW(validate_profile(bad), UnsupportedError);
  bad = p;
  bad.fidelity = {FidelityTier::l3, Oracle::none, Claim::bit_exact};
  EXPECT_THROW(validate_profile(bad), UnsupportedError);
  bad = p;
  bad.fidelity = {FidelityTier::l1, Oracle::mlx_whisper, Claim::bit_exact};  // whisper graph only
  EXPECT_THROW(validate_profile(bad), UnsupportedError);
  bad = p;
  bad.required_capabilities = {Capability::safetensors, Capability::autoregressive};
  EXPECT_THROW(validate_profile(bad), UnsupportedError);
  bad = p;
  bad.execution.implementation = "custom";
  bad.execution.specialization = Specialization::dedicated;
  EXPECT_THROW(validate_profile(bad), UnsupportedError);
  auto l3 = p;
  l3.fidelity = {FidelityTier::l3, Oracle::none, Claim::measured};
  EXPECT_NO_THROW(validate_profile(l3));
}

TEST(Profile, JsonRoundTripAndFileErrors) {
  auto p = artifact_profile("0123456789abcdef");
  auto back = profile_from_json(to_json(p), "p");
  EXPECT_EQ(to_json(back), to_json(p));
  json bad = to_json(p);
  bad["execution"]["graph"] = "gpt9";
  try {
    profile_from_json(bad, "profiles[0]");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("profiles[0].execution.graph: unknown value \"gpt9\""), std::string::npos);
  }
}

TEST(Profile, Gemma3TextAndMultimodalGemma3RunTheGemma3TextGraph) {
  for (const char* type : {"gemma3_text", "gemma3"}) {
    json config = qwen3_config();
    config["model_type"] = type;
    TempModel m(temp_root(std::string("g3") + type) / "a" / "b" / "m", config);
    auto r = resolve_profile(m.load());
    EXPECT_EQ(r.profile.id, "gemma3_text-dedicated") << type;
    EXPECT_EQ(r.profile.execution.graph, Graph::gemma3_text) << type;
    EXPECT_EQ(r.profile.execution.specialization, Specialization::dedicated) << type;
  }
}

TEST(Fingerprint, CoversGemma3Keys) {
  json base = {{"model_type", "gemma3_text"}, {"sliding_window_pattern", 6}, {"rope_local_base_freq", 10000.0},
               {"query_pre_attn_scalar", 256}, {"text_config", {{"head_dim", 256}}}};
  const auto fp = config_fingerprint(base);
  for (const char* key : {"sliding_window_pattern", "rope_local_base_freq", "query_pre_attn_scalar", "text_config"}) {
    json changed = base;
    changed[key] = key == std::string("text_config") ? json{{"head_dim", 128}} : json(3);
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}

TEST(Profile, Gemma4TextAndMultimodalGemma4RunTheGemma4TextGraph) {
  for (const char* type : {"gemma4_text", "gemma4", "gemma4_unified"}) {
    json config = qwen3_config();
    config["model_type"] = type;
    TempModel m(temp_root(std::string("g4") + type) / "a" / "b" / "m", config);
    auto r = resolve_profile(m.load());
    EXPECT_EQ(r.profile.id, "gemma4_text-dedicated") << type;
    EXPECT_EQ(r.profile.execution.graph, Graph::gemma4_text) << type;
    EXPECT_EQ(r.profile.execution.specialization, Specialization::dedicated) << type;
  }
}

TEST(Fingerprint, CoversGemma4Keys) {
  json base = {{"model_type", "gemma4_text"}, {"global_head_dim", 512}, {"num_global_key_value_heads", 4},
               {"num_kv_shared_layers", 20}, {"hidden_size_per_layer_input", 256},
               {"vocab_size_per_layer_input", 262144}, {"attention_k_eq_v", false}, {"use_double_wide_mlp", true},
               {"final_logit_softcapping", 30.0}, {"enable_moe_block", false}};
  const auto fp = config_fingerprint(base);
  for (const char* key : {"global_head_dim", "num_global_key_value_heads", "num_kv_shared_layers",
                          "hidden_size_per_layer_input", "vocab_size_per_layer_input", "attention_k_eq_v",
                          "use_double_wide_mlp", "final_logit_softcapping", "enable_moe_block"}) {
    json changed = base;
    changed[key] = 3;
    EXPECT_NE(config_fingerprint(changed), fp) << key;
  }
}
