#include "mlxrt/cli/generation_setup.h"

#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "mlxrt/cli/common.h"
#include "mlxrt/io/model_config.h"
#include "mlxrt/io/model_dir.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace {

const std::map<std::string, std::string>& flag_names() {
  static const std::map<std::string, std::string> names = {
      {"temp", "--temp"},
      {"top_p", "--top-p"},
      {"min_p", "--min-p"},
      {"min_tokens_to_keep", "--min-tokens-to-keep"},
      {"top_k", "--top-k"},
      {"xtc_probability", "--xtc-probability"},
      {"xtc_threshold", "--xtc-threshold"},
      {"logit_bias", "--logit-bias"},
      {"repetition_penalty", "--repetition-penalty"},
      {"repetition_context_size", "--repetition-context-size"},
      {"presence_penalty", "--presence-penalty"},
      {"presence_context_size", "--presence-context-size"},
      {"frequency_penalty", "--frequency-penalty"},
      {"frequency_context_size", "--frequency-context-size"},
  };
  return names;
}

[[noreturn]] void fail(const generate::ParamProblem& p) {
  auto it = flag_names().find(p.param);
  throw UsageError((it == flag_names().end() ? p.param : it->second) + ": " + p.message);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The expert index of a tensor saved one expert at a time ("...experts.<N>...."), if it is one.
std::optional<int> moe_expert_index(const std::string& name) {
  static const std::string tag = ".experts.";
  const auto at = name.find(tag);
  if (at == std::string::npos) return std::nullopt;
  const auto start = at + tag.size();
  const auto end = name.find('.', start);
  if (end == std::string::npos || end == start) return std::nullopt;
  for (auto i = start; i < end; ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  return std::stoi(name.substr(start, end - start));
}

}  // namespace

void add_sampling_flags(CLI::App* cmd, SamplingFlags& f, bool sampler_flags, bool penalty_flags) {
  if (sampler_flags) {
    cmd->add_option("--temp", f.sampler.temp, "Sampling temperature")->capture_default_str();
    cmd->add_option("--top-p", f.sampler.top_p, "Sampling top-p")->capture_default_str();
    cmd->add_option("--min-p", f.sampler.min_p, "Sampling min-p")->capture_default_str();
    cmd->add_option("--top-k", f.sampler.top_k, "Sampling top-k")->capture_default_str();
    cmd->add_option("--xtc-probability", f.sampler.xtc_probability,
                    "Probability of XTC sampling to happen each next token")
        ->capture_default_str();
    cmd->add_option("--xtc-threshold", f.sampler.xtc_threshold,
                    "Threshold the probs of each next token candidate to be sampled by XTC")
        ->capture_default_str();
    cmd->add_option("--min-tokens-to-keep", f.sampler.min_tokens_to_keep, "Minimum tokens to keep for min-p sampling.")
        ->capture_default_str();
  }
  if (penalty_flags) {
    cmd->add_option("--repetition-penalty", f.repetition_penalty, "Multiplicative penalty for repeated tokens");
    cmd->add_option("--repetition-context-size", f.repetition_context_size, "Tokens the repetition penalty looks at")
        ->capture_default_str();
    cmd->add_option("--presence-penalty", f.presence_penalty, "Additive penalty for tokens already present");
    cmd->add_option("--presence-context-size", f.presence_context_size, "Tokens the presence penalty looks at")
        ->capture_default_str();
    cmd->add_option("--frequency-penalty", f.frequency_penalty, "Additive penalty per earlier occurrence");
    cmd->add_option("--frequency-context-size", f.frequency_context_size, "Tokens the frequency penalty looks at")
        ->capture_default_str();
    cmd->add_option("--logit-bias", f.logit_bias, "JSON object of token id -> additive logit bias");
  }
}

void check_sampling_flags(const SamplingFlags& f) {
  if (auto p = generate::check_sampler_params(f.sampler)) fail(*p);
  make_cli_processors(f, std::nullopt);
}

generate::Sampler make_cli_sampler(const generate::SamplerParams& params,
                                   std::shared_ptr<generate::RandomState> rng) {
  if (auto p = generate::check_sampler_params(params)) fail(*p);
  return generate::make_sampler(params, std::move(rng));
}

generate::LogitsProcessorParams cli_processor_params(const SamplingFlags& f) {
  generate::LogitsProcessorParams p;
  if (!f.logit_bias.empty()) p.logit_bias = generate::parse_logit_bias(f.logit_bias, "--logit-bias");
  p.repetition_penalty = f.repetition_penalty;
  p.repetition_context_size = f.repetition_context_size;
  p.presence_penalty = f.presence_penalty;
  p.presence_context_size = f.presence_context_size;
  p.frequency_penalty = f.frequency_penalty;
  p.frequency_context_size = f.frequency_context_size;
  return p;
}

std::vector<generate::LogitsProcessor> make_cli_processors(const SamplingFlags& f, std::optional<int> vocab_size) {
  const auto p = cli_processor_params(f);
  if (auto problem = generate::check_logits_processor_params(p, vocab_size)) fail(*problem);
  return generate::make_logits_processors(p, vocab_size);
}

namespace {

// ---- gemma4 (gemma4_text, gemma4, gemma4_unified) ----
// The names gemma4.py's and gemma4_text.py's sanitize keep: a multimodal checkpoint's text model
// under language_model. (its towers dropped), no key/value projections for KV-shared layers, and
// fused experts split into switch layers.
void gemma4_sanitized_names(const io::ModelConfig& config, io::WeightMap& weights) {
  const auto& type = config.model_type();
  const bool multimodal = type == "gemma4" || type == "gemma4_unified";
  const auto& raw = config.raw();
  const auto& text = multimodal ? (raw.contains("text_config") && raw["text_config"].is_object()
                                       ? raw["text_config"] : nlohmann::json::object())
                                : raw;
  auto int_or = [&](const char* key, int fallback) {
    return text.contains(key) && text[key].is_number_integer() ? text[key].get<int>() : fallback;
  };
  const int first_shared = int_or("num_hidden_layers", 35) - int_or("num_kv_shared_layers", 20);
  io::WeightMap kept;
  for (auto& [name, tensor] : weights) {
    std::string k = name;
    if (multimodal) {
      if (k.rfind("model.", 0) == 0) {
        k = k.substr(6);
        if (k.rfind("language_model.", 0) == 0) k = "language_model.model." + k.substr(15);
      }
      if (k.rfind("language_model.", 0) != 0) continue;  // towers and anything else outside the text model
    }
    const auto at = k.find("layers.");
    const bool kv_part = k.find(".self_attn.k_proj") != std::string::npos ||
                         k.find(".self_attn.v_proj") != std::string::npos;
    if (kv_part && at != std::string::npos && std::atoi(k.c_str() + at + 7) >= first_shared) continue;
    // The MoE block's experts as Hugging Face stores them: gate_up_proj becomes the SwitchGLU's
    // gate_proj and up_proj, down_proj its down_proj (three switch layers).
    if (ends_with(k, ".experts.gate_up_proj")) {
      const auto base = k.substr(0, k.size() - 13) + ".switch_glu.";
      kept.insert_or_assign(base + "gate_proj.weight", tensor);
      kept.insert_or_assign(base + "up_proj.weight", tensor);
      continue;
    }
    if (ends_with(k, ".experts.down_proj")) {
      kept.insert_or_assign(k.substr(0, k.size() - 10) + ".switch_glu.down_proj.weight", tensor);
      continue;
    }
    kept.insert_or_assign(k, tensor);
  }
  weights = std::move(kept);
}
// ---- end gemma4 ----

// ---- gemma3n ----
// gemma3n.py's sanitize drops the towers under model. (vision, audio and their embedders).
bool gemma3n_tower(const std::string& name) {
  for (const char* tower : {"vision_tower", "audio_tower", "embed_audio", "embed_vision"}) {
    const std::string key = std::string("model.") + tower;
    if (name == key || name.rfind(key + ".", 0) == 0) return true;
  }
  return false;
}
// ---- end gemma3n ----

}  // namespace

int model_construction_draws(const std::filesystem::path& model_dir) {
  const auto dir = io::resolve_model_dir(model_dir);
  auto weights = io::load_weights(dir);
  const auto config = io::ModelConfig::load(dir);
  const auto& model_type = config.model_type();
  if (model_type == "gemma4_text" || model_type == "gemma4" || model_type == "gemma4_unified")
    gemma4_sanitized_names(config, weights);
  // gemma3 and qwen3_5 build only their text model, under language_model. (sanitize drops the
  // vision tower).
  const bool qwen3_5 = model_type == "qwen3_5" || model_type == "qwen3_5_moe";
  const bool hybrid = qwen3_5 || model_type == "qwen3_next";
  const std::string text_prefix = model_type == "gemma3" || qwen3_5 ? "language_model." : "";
  int draws = 0;
  // gemma3_text builds lm_head whatever the checkpoint holds; sanitize drops it from a tied one.
  if ((model_type == "gemma3_text" || model_type == "gemma3") && !weights.count(text_prefix + "lm_head.weight"))
    draws += 1;
  // Elsewhere a tied head is never built (tie_word_embeddings defaults to true in qwen2.py and
  // llama.py, to false in phi3.py), and sanitize drops a lm_head.weight the checkpoint still holds.
  const auto& raw = config.raw();
  // Model types whose ModelArgs default to an untied head, and those whose Model builds lm_head
  // whatever tie_word_embeddings says (so no saved head is dropped): mixture of experts (mixtral;
  // qwen2_moe, gpt_oss) and the dense families.
  static const std::set<std::string> untied_by_default = {
      "phi3",
      "mixtral",
      "olmo3",
      "minicpm",
      "hunyuan_v1_dense",
      "internlm3",
      "minicpm3",
  };
  static const std::set<std::string> head_always_built = {
      "qwen2_moe",
      "gpt_oss",
      "glm4",
      "stablelm",
      "phi",
      "helium",
  };
  const bool tied_by_default = !untied_by_default.count(model_type);
  bool tied = raw.contains("tie_word_embeddings") ? raw["tie_word_embeddings"] == true : tied_by_default;
  std::string head_name = "lm_head.weight";
  // -- mistral3 (and llava): only the text model is built, under language_model.; its head is
  // untied unless text_config says so, and sanitize drops the vision tower and projector.
  const bool mistral3 = model_type == "mistral3" || model_type == "llava";
  if (mistral3) {
    const auto& text = raw.contains("text_config") ? raw["text_config"] : nlohmann::json::object();
    tied = text.contains("tie_word_embeddings") && text["tie_word_embeddings"] == true;
    head_name = weights.count("lm_head.weight") ? "lm_head.weight" : "language_model.lm_head.weight";
  }
  // -- end mistral3
  // The hybrid families' sanitize never drops a head of an MLX checkpoint (a tied one that holds
  // one is refused).
  const bool dropped_head = !hybrid && model_type != "gemma3_text" && model_type != "gemma3" &&
                            !head_always_built.count(model_type) && tied && weights.count(head_name);
  // minicpm: sanitize copies the embedding into a missing lm_head.weight; the head is built.
  if (model_type == "minicpm" && !tied && !weights.count("lm_head.weight")) draws += 1;
  // helium builds nn.Linear lm_head twice when untied (the second replaces the first).
  if (model_type == "helium" && !tied) draws += 1;
  for (const auto& [name, tensor] : weights) {
    if (name.rfind(text_prefix, 0) != 0) continue;
    if (model_type == "gemma3n" && gemma3n_tower(name)) continue;
    if (hybrid) {
      // The multi-token-prediction head is dropped by sanitize; each gated delta net draws its A.
      if (name.find("mtp.") != std::string::npos) continue;
      if (ends_with(name, ".A_log")) draws += 1;
    }
    // --- mixture of experts: gpt-oss's original layout, which sanitize splits: gate_up_proj_blocks
    // becomes gate_proj and up_proj, down_proj_blocks down_proj, each a quantized switch layer.
    if (model_type == "gpt_oss" && ends_with(name, "_proj_blocks")) {
      draws += (name.find("gate_up_proj") != std::string::npos ? 2 : 1) * 2;
      continue;
    }
    // --- end of the mixture-of-experts block
    // -- phixtral (and phi-msft): experts saved one by one (moe.mlp.N.fc1 / fc2), which sanitize
    // stacks into one SwitchLinear each: one draw for its weight, one more when quantized (its bias
    // starts at zeros).
    if (model_type == "phixtral" || model_type == "phi-msft") {
      if (const auto at = name.find(".moe.mlp."); at != std::string::npos) {
        if (name.compare(at + 9, 2, "0.") != 0 || !ends_with(name, ".weight")) continue;
        draws += 1;
        if (weights.count(name.substr(0, name.size() - 7) + ".scales")) draws += 1;
        continue;
      }
    }
    // -- end phixtral
    if (!ends_with(name, ".weight") || tensor.ndim() < 2) continue;
    if (dropped_head && name == head_name) continue;
    if (mistral3 && (name.find("vision_tower") != std::string::npos ||
                     name.find("multi_modal_projector") != std::string::npos))
      continue;
    const auto prefix = name.substr(0, name.size() - 7);
    // --- lfm2: each ShortConv's nn.Conv1d draws its weight (never quantized); its bias starts at zeros.
    if (model_type == "lfm2" && ends_with(name, ".conv.conv.weight")) {
      draws += 1;
      continue;
    }
    // --- end lfm2
    // --- mixture of experts: a switch layer (a stacked [experts, out, in] weight, or experts saved
    // one by one, "experts.N.", which sanitize stacks into one) draws once for its weight, once more
    // when quantized; its bias starts at zeros.
    if (const auto e = moe_expert_index(name); tensor.ndim() == 3 || e) {
      if (e && *e != 0) continue;
      draws += 1;
      if (weights.count(prefix + ".scales")) draws += 1;
      continue;
    }
    // --- end of the mixture-of-experts block
    draws += 1;
    if (weights.count(prefix + ".scales")) draws += 1;
    if (weights.count(prefix + ".bias")) draws += 1;
  }
  return draws;
}

int sharded_load_draws(const std::filesystem::path& model_dir, const model::LoadedModel& loaded, bool distributed) {
  if (!distributed) return 0;
  return model_construction_draws(model_dir) + loaded.shard_draws;
}

int adapter_construction_draws(const std::string& adapter_path) {
  if (adapter_path.empty()) return 0;
  return 2 * model::nn::Adapter::load(adapter_path)->wrapped_layers();
}

Session load_session(const std::string& model, const std::string& profile_file,
                     std::optional<double> expert_memory_gb, const std::string& adapter_path,
                     const std::optional<model::Parallel>& parallel, bool expert_prefetch,
                     model::FidelityTier fidelity, bool row_exact, bool multi_token_prediction) {
  std::shared_ptr<model::nn::ExpertStore> experts;
  auto loaded = load_cli_model(model, profile_file, expert_memory_gb, experts, adapter_path, parallel, expert_prefetch,
                               fidelity, row_exact, multi_token_prediction);
  auto dir = io::resolve_model_dir(model);
  auto tok = tokenizer::Tokenizer::from_dir(dir);
  auto chat_template = tmpl::load_chat_template(dir);
  auto special = tmpl::read_special_tokens(dir);
  auto eos = tok.eos_token_ids();
  return Session{dir, std::move(loaded), std::move(tok), std::move(chat_template), std::move(special),
                 std::move(eos), std::move(experts)};
}

void add_eos_token(Session& s, const std::string& token, const std::string& flag) {
  std::optional<int32_t> id;
  try {
    size_t used = 0;
    long v = std::stol(token, &used);
    if (used == token.size()) id = static_cast<int32_t>(v);
  } catch (const std::exception&) {
  }
  if (!id) id = s.tokenizer.token_to_id(token);
  if (!id && s.tokenizer.config().unk_token) id = s.tokenizer.token_to_id(*s.tokenizer.config().unk_token);
  if (!id) throw UsageError(flag + ": '" + token + "' is not a token for this tokenizer");
  if (std::find(s.eos_token_ids.begin(), s.eos_token_ids.end(), *id) == s.eos_token_ids.end())
    s.eos_token_ids.push_back(*id);
}

std::string apply_chat_template(const Session& s, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                bool continue_final_message, const nlohmann::ordered_json& template_kwargs) {
  if (!s.chat_template) throw UsageError("the model has no chat template");
  tmpl::ChatTemplateOptions opts;
  opts.add_generation_prompt = add_generation_prompt;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (template_kwargs.is_object()) {
    for (const auto& [k, v] : template_kwargs.items()) {
      if (k == "tools") opts.tools = v;
      else if (k == "documents") opts.documents = v;
      else extra[k] = v;
    }
  }
  opts.extra = extra;
  auto rendered = s.chat_template->render(messages, opts, s.special_tokens);
  if (!continue_final_message) return rendered;
  // transformers: cut the rendering right after the final message's content.
  const auto& final_message = messages.back().at("content").get_ref<const std::string&>();
  auto strip = [](const std::string& t, bool left, bool right) {
    size_t b = 0, e = t.size();
    const char* ws = " \t\n\r\f\v";
    if (left) b = t.find_first_not_of(ws) == std::string::npos ? t.size() : t.find_first_not_of(ws);
    if (right) e = t.find_last_not_of(ws) == std::string::npos ? b : t.find_last_not_of(ws) + 1;
    return t.substr(b, e > b ? e - b : 0);
  };
  auto stripped = strip(final_message, true, true);
  auto loc = rendered.rfind(stripped);
  if (loc == std::string::npos)
    throw UsageError("--prefill-response: the chat template does not render the final message's content");
  auto lstripped = strip(final_message, true, false);
  if (rendered.compare(loc, lstripped.size(), final_message) == 0) return rendered.substr(0, loc + lstripped.size());
  return rendered.substr(0, loc + stripped.size());
}

std::vector<int32_t> xtc_special_tokens(const Session& s) {
  auto ids = s.tokenizer.encode("\n");
  ids.insert(ids.end(), s.eos_token_ids.begin(), s.eos_token_ids.end());
  return ids;
}

}  // namespace mlxrt::cli
