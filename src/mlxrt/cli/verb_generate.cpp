// `mlxrt generate`: mlx_lm.generate's command (mlx_lm/generate.py main() @ mlx-lm 0.32.2): the same
// flags and defaults, the prompt rendered with the chat template as it does, text streamed as it
// is generated, the same footer. Ours besides: --prompt-tokens (ids instead of text), the penalty
// and --logit-bias flags, --logprobs-file, --profile-file. With --draft-model, speculative decoding
// as mlx-lm's speculative_generate_step does it (generate/speculative.h); with --mtp, the same with
// the model's own multi-token-prediction head as the drafter (generate/mtp_speculative.h).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <unordered_map>

#include <mlx/io.h>
#include <mlx/memory.h>
#include <mlx/ops.h>

#include "mlxrt/cache/prompt_cache.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/generate/mtp_speculative.h"
#include "mlxrt/generate/prefill_warm_up.h"
#include "mlxrt/cli/generation_setup.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/convert/default_model.h"
#include "mlxrt/structured/grammar_constraint.h"
#include "mlxrt/generate/json_schema_check.h"
#include "mlxrt/generate/speculative.h"
#include "mlxrt/generate/text_generation.h"
#include "mlxrt/io/model_dir.h"
#include "mlxrt/model/make_prompt_cache.h"

namespace mlxrt::cli {

namespace mx = mlx::core;

namespace {

struct Args {
  std::string model, draft_model, prompt = "hello", prompt_tokens, system_prompt, chat_template_config, prompt_cache_file;
  std::optional<std::string> prefill_response;
  std::vector<std::string> extra_eos_token;
  std::string profile_file, logprobs_file, verbose = "True", adapter_path;
  std::string json_schema, grammar;  // structured output: a JSON schema file, a GBNF file
  int max_tokens = 100;  // DEFAULT_MAX_TOKENS
  int num_draft_tokens = 3;
  std::optional<uint64_t> seed;
  bool ignore_chat_template = false, use_default_chat_template = false, trust_remote_code = false;
  std::optional<int> max_kv_size, kv_bits;
  std::optional<double> expert_memory;
  bool expert_prefetch = false;
  bool spec_exact = false;  // --spec-exact
  bool mtp = false;         // --mtp
  bool warm_up = false;     // --warm-up
  int kv_group_size = 64, quantized_kv_start = 5000, prefill_step_size = 2048;
  SamplingFlags sampling;
  DistributedArgs dist;
  model::FidelityTier fidelity = model::FidelityTier::l1;  // --fidelity
};

/** --warm-up: the prefill attention's shapes built before the prompt (generate/prefill_warm_up.h),
 * so the footer's prompt figure is a warm process's; what it cost goes to stderr. */
void warm_up_if_asked(const Args& a, model::CausalLM& model) {
  if (!a.warm_up) return;
  std::cerr << generate::describe(generate::warm_up_prefill_shapes(model, a.prefill_step_size, a.max_kv_size, a.kv_bits))
            << std::endl;
}

/** str2bool of mlx_lm.generate. */
bool str2bool(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s != "false" && s != "f";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

/** The logprobs of every generated token, [T, vocab] in the model's dtype, for parity checks; with
 * a draft model also "from_draft" [T] (uint8: 1 for an accepted draft token). */
void write_logprobs(const std::string& path, const std::vector<mx::array>& rows, const std::vector<uint8_t>* from_draft) {
  if (path.empty() || rows.empty()) return;
  std::unordered_map<std::string, mx::array> tensors{{"logprobs", mx::stack(rows, 0)}};
  if (from_draft)
    tensors.insert({"from_draft", mx::array(from_draft->data(), {static_cast<int>(from_draft->size())}, mx::uint8)});
  write_safetensors_output(path, tensors, "--logprobs-file");
}

void print_footer(const generate::GenerationResponse& r) {
  std::printf("Prompt: %d tokens, %.3f tokens-per-sec\n", r.prompt_tokens, r.prompt_tps);
  std::printf("Generation: %d tokens, %.3f tokens-per-sec\n", r.generation_tokens, r.generation_tps);
  std::printf("Peak memory: %.3f GB\n", r.peak_memory);
}

/** The PRNG as mlx_lm.generate leaves it: seeded (when --seed is given) before the model is built,
 * and the draft model (loaded after it) built before the sampler draws. */
std::shared_ptr<generate::RandomState> make_rng(const Args& a) {
  auto rng = std::make_shared<generate::RandomState>();
  if (a.seed) {
    rng->seed(*a.seed);
    rng->skip(model_construction_draws(a.model) + adapter_construction_draws(a.adapter_path));
    if (!a.draft_model.empty()) rng->skip(model_construction_draws(a.draft_model));
  }
  return rng;
}

/** Row-exact loading: --spec-exact, and greedy --mtp (its accepted tokens then equal plain decoding's). */
bool row_exact(const Args& a) { return a.spec_exact || (a.mtp && a.sampling.sampler.temp == 0); }

/** `load()`, whose refusal of exact mode says that greedy --mtp asked for it (the flag was not given). */
template <class Load>
auto load_naming_mtp(const Args& a, Load&& load) {
  try {
    return load();
  } catch (const UnsupportedError& e) {
    if (!a.mtp || a.spec_exact || !row_exact(a)) throw;
    throw UnsupportedError(std::string("greedy --mtp runs in exact mode (--spec-exact), which refused: ") + e.what());
  }
}

/** --mtp's checks that need no model. */
void check_mtp_flags(const Args& a) {
  if (!a.mtp) return;
  if (!a.draft_model.empty()) throw UsageError("--mtp and --draft-model: choose one drafter");
  if (a.num_draft_tokens < 1 || a.num_draft_tokens > generate::kMaxDraftTokens)
    throw UsageError("--num-draft-tokens: must be between 1 and " + std::to_string(generate::kMaxDraftTokens) +
                     " (got " + std::to_string(a.num_draft_tokens) + ")");
  if (!a.prompt_cache_file.empty())
    throw UsageError("--prompt-cache-file: not supported with --mtp (the MTP head needs the main model's hidden state "
                     "at every prompt position, which the file does not hold)");
  if (a.kv_bits) throw UsageError("--mtp cannot be combined with --kv-bits (a quantized KV cache)");
}

/** The footer's line for --mtp: how many drafted tokens the main model accepted. */
void print_mtp_stats(int accepted, int drafted) {
  std::cout << "MTP: " << accepted << " of " << drafted << " drafted tokens accepted\n";
}

/** --draft-model's checks that need no model: the flags it combines with, and its directory. */
void check_draft_flags(const Args& a) {
  if (a.draft_model.empty()) return;
  if (a.num_draft_tokens < 1 || a.num_draft_tokens > generate::kMaxDraftTokens)
    throw UsageError("--num-draft-tokens: must be between 1 and " + std::to_string(generate::kMaxDraftTokens) +
                     " (got " + std::to_string(a.num_draft_tokens) + ")");
  if (a.max_tokens < 0)
    throw UsageError("--max-tokens: speculative decoding (--draft-model) needs a positive limit (got " +
                     std::to_string(a.max_tokens) + ")");
  if (!a.prompt_cache_file.empty())
    throw UsageError("--prompt-cache-file: not supported with --draft-model (the file holds no draft model caches)");
  try {
    io::resolve_model_dir(a.draft_model);
  } catch (const Error& e) {
    throw UsageError(std::string("--draft-model: ") + e.what());
  }
}

/** The draft model, loaded after the main one as mlx_lm.generate loads it. */
struct DraftModel {
  model::LoadedModel loaded;
  std::shared_ptr<model::nn::ExpertStore> experts;
};

std::optional<DraftModel> load_draft(const Args& a) {
  if (a.draft_model.empty()) return std::nullopt;
  DraftModel d;
  d.loaded =
      load_cli_model(a.draft_model, a.profile_file, std::nullopt, d.experts, {}, std::nullopt, false, a.fidelity);
  return d;
}

/** mlx_lm.generate's "Draft model tokenizer does not match model tokenizer." check: the two
 * tokenizers' vocabularies (without added tokens) have the same size. */
void check_draft_tokenizer(const Args& a, const tokenizer::Tokenizer& main_tokenizer) {
  auto dir = io::resolve_model_dir(a.draft_model);
  std::optional<tokenizer::Tokenizer> draft;
  try {
    draft = tokenizer::Tokenizer::from_dir(dir);
  } catch (const Error& e) {
    throw UsageError(std::string("--draft-model: its tokenizer could not be loaded: ") + e.what());
  }
  if (draft->base_vocab_size() != main_tokenizer.base_vocab_size())
    throw UsageError("--draft-model: the draft model's tokenizer does not match the model's tokenizer (" +
                     std::to_string(draft->base_vocab_size()) + " tokens in its vocabulary, the model's has " +
                     std::to_string(main_tokenizer.base_vocab_size()) + ")");
}

cache::CacheList load_cache_file(const Args& a);

/** --prompt-tokens without tokenizer files: the ids are printed instead of text. With
 * --prompt-cache-file the ids continue the saved cache (they are what follows its prompt). */
void run_ids_only(const Args& a, generate::TextGenerationOptions options, const DistributedRun& run) {
  auto ids = parse_token_list(a.prompt_tokens, "--prompt-tokens");
  std::optional<cache::CacheList> prompt_cache;
  if (!a.prompt_cache_file.empty()) prompt_cache = load_cache_file(a);
  auto rng = make_rng(a);
  std::shared_ptr<model::nn::ExpertStore> experts;
  auto loaded = load_naming_mtp(a, [&] {
    return load_cli_model(a.model, a.profile_file, a.expert_memory, experts, a.adapter_path, run.parallel,
                          a.expert_prefetch, a.fidelity, row_exact(a), a.mtp);
  });
  if (a.seed) rng->skip(sharded_load_draws(a.model, loaded, run.parallel.has_value()));
  if (prompt_cache && run.parallel)
    prompt_cache = shard_prompt_cache(std::move(*prompt_cache), *run.parallel,
                                      static_cast<int>(model::make_prompt_cache(*loaded.model).size()),
                                      a.prompt_cache_file);
  if (prompt_cache) model::check_prompt_cache(*loaded.model, *prompt_cache, a.prompt_cache_file);
  auto draft = load_draft(a);
  const int vocab = loaded.model->vocab_size();
  // No tokenizer to compare: the two models' vocabularies must have the same size.
  if (draft && draft->loaded.model->vocab_size() != vocab)
    throw UsageError("--draft-model: the draft model's vocabulary (" + std::to_string(draft->loaded.model->vocab_size()) +
                     " tokens) differs from the model's (" + std::to_string(vocab) + ")");
  if (draft) generate::check_speculative_cache(*loaded.model, a.spec_exact);
  for (auto id : ids)
    if (id >= vocab)
      throw UsageError("--prompt-tokens: id " + std::to_string(id) + " is outside the vocabulary (size " +
                       std::to_string(vocab) + ")");
  const auto& eos = loaded.config.eos_token_ids();
  auto params = a.sampling.sampler;
  params.xtc_special_tokens = eos;  // no tokenizer: the config's eos ids only
  options.sampler = make_cli_sampler(params, rng);
  options.logits_processors = make_cli_processors(a.sampling, vocab);
  warm_up_if_asked(a, *loaded.model);
  std::cout << "==========\n";
  auto tic = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - tic).count(); };
  std::optional<generate::TokenGenerator> plain;
  std::optional<generate::SpeculativeTokenGenerator> speculative;
  std::optional<generate::MtpTokenGenerator> mtp;
  if (draft)
    speculative.emplace(*loaded.model, *draft->loaded.model, ids, options, a.num_draft_tokens);
  else if (a.mtp)
    mtp.emplace(*loaded.model, ids, options, a.num_draft_tokens);
  else
    plain.emplace(*loaded.model, ids, options, prompt_cache ? &*prompt_cache : nullptr);
  std::vector<uint8_t> from_draft;
  generate::GenerationResponse stats{"", 0, mx::array(0.0f)};
  stats.prompt_tokens = static_cast<int>(ids.size());
  std::vector<mx::array> rows;
  bool printed = false;
  for (int n = 0;; ++n) {
    auto step = plain ? plain->next() : mtp ? mtp->next() : speculative->next();
    if (!step) break;
    if (n == 0) {
      stats.prompt_tps = ids.size() / since();
      tic = std::chrono::steady_clock::now();
    }
    stats.generation_tokens = n + 1;
    stats.generation_tps = (n + 1) / since();
    if (std::find(eos.begin(), eos.end(), step->token) != eos.end()) break;
    if (!a.logprobs_file.empty()) {
      rows.push_back(step->logprobs);
      from_draft.push_back(step->from_draft);
    }
    std::cout << (printed ? " " : "") << step->token << std::flush;
    printed = true;
    if (n + 1 == a.max_tokens) break;
  }
  stats.peak_memory = mx::get_peak_memory() / 1e9;
  std::cout << "\n==========\n";
  if (printed)
    print_footer(stats);
  else
    std::cout << "No text generated for this prompt\n";
  if (mtp) print_mtp_stats(mtp->accepted(), mtp->drafted());
  if (run.primary()) write_logprobs(a.logprobs_file, rows, draft || mtp ? &from_draft : nullptr);
  std::cout << std::flush;
  print_expert_stats(experts);
}

nlohmann::ordered_json parse_template_config(const std::string& text) {
  if (text.empty()) return nlohmann::ordered_json::object();
  nlohmann::ordered_json kwargs;
  try {
    kwargs = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("--chat-template-config: not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!kwargs.is_object()) throw UsageError("--chat-template-config: expected a JSON object");
  return kwargs;
}

/** load_prompt_cache plus mlx_lm.generate's checks of its model and KV quantization. */
cache::CacheList load_cache_file(const Args& a) {
  auto [loaded_cache, metadata] = cache::load_prompt_cache(a.prompt_cache_file);
  auto it = metadata.find("model");
  if (it != metadata.end() && it->second != a.model)
    throw UsageError("--prompt-cache-file: providing a different model (" + a.model +
                     ") than that used to create the prompt cache (" + it->second + ") is an error");
  if (!loaded_cache.empty())
    if (auto* q = dynamic_cast<const cache::QuantizedKVCache*>(loaded_cache[0].get())) {
      if (a.kv_bits && *a.kv_bits != q->bits())
        throw UsageError("--kv-bits does not match the kv cache loaded from --prompt-cache-file");
      if (a.kv_group_size != q->group_size())
        throw UsageError("--kv-group-size does not match the kv cache loaded from --prompt-cache-file");
    }
  return std::move(loaded_cache);
}

/** The prompt ids as mlx_lm.generate makes them: escapes, stdin, chat template (only the query's
 * part when a prompt cache holds the prefix), then encode. */
std::vector<int32_t> prompt_ids(const Args& a, const Session& session, bool have_cache) {
  const int vocab = session.loaded.model->vocab_size();
  if (!a.prompt_tokens.empty()) {
    auto ids = parse_token_list(a.prompt_tokens, "--prompt-tokens");
    for (auto id : ids)
      if (id >= vocab)
        throw UsageError("--prompt-tokens: id " + std::to_string(id) + " is outside the vocabulary (size " +
                         std::to_string(vocab) + ")");
    return ids;
  }
  auto prompt = replace_all(replace_all(a.prompt, "\\n", "\n"), "\\t", "\t");
  if (prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  const bool use_chat_template = !a.ignore_chat_template && session.chat_template.has_value();
  if (use_chat_template) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", a.system_prompt}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    const bool has_prefill = a.prefill_response.has_value();
    if (has_prefill) messages.push_back({{"role", "assistant"}, {"content", *a.prefill_response}});
    prompt = apply_chat_template(session, messages, !has_prefill, has_prefill,
                                 parse_template_config(a.chat_template_config));
    if (have_cache) {
      // The cache holds the prefix: keep the part from the query on.
      messages.back()["content"] = "<query>";
      auto probe = apply_chat_template(session, messages, !has_prefill, has_prefill, nlohmann::ordered_json::object());
      auto at = probe.find("<query>");
      if (at == std::string::npos || at > prompt.size())
        throw UsageError("--prompt-cache-file: the chat template does not render the query where expected");
      prompt = prompt.substr(at);
    }
  }
  return session.tokenizer.encode(prompt, !use_chat_template);
}

bool has_tokenizer_files(const std::string& model) {
  auto dir = io::resolve_model_dir(model);
  return std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tokenizer.model") ||
         std::filesystem::exists(dir / "vocab.json");
}

/** --json-schema / --grammar: the file's text, read before any model is loaded. */
std::optional<std::pair<std::string, std::string>> read_constraint_file(const Args& a) {
  if (!a.json_schema.empty() && !a.grammar.empty())
    throw UsageError("--json-schema and --grammar: give one of them");
  const std::string& path = a.json_schema.empty() ? a.grammar : a.json_schema;
  if (path.empty()) return std::nullopt;
  const std::string flag = a.json_schema.empty() ? "--grammar" : "--json-schema";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag + ": cannot read " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!a.json_schema.empty()) {
    auto problem = generate::unsupported_schema_keyword(text);
    if (nlohmann::json::parse(text, nullptr, false).is_discarded())
      throw UsageError(flag + " " + path + ": not valid JSON");
    if (!problem.empty())
      throw UsageError(flag + " " + path + ": " + problem + " is not supported by constrained decoding");
  }
  return std::make_pair(flag + " " + path, text);
}

void run(const Args& a) {
  if (a.max_tokens == 0) throw UsageError("--max-tokens: must be non-zero (use -1 for no limit)");
  if (a.max_tokens < -1) throw UsageError("--max-tokens: must be -1 (no limit) or positive");
  if (a.prefill_step_size <= 0) throw UsageError("--prefill-step-size: must be positive");
  cache::validate_kv_quantization(a.kv_bits, a.kv_group_size, a.quantized_kv_start);
  check_sampling_flags(a.sampling);  // before the model is loaded
  if (a.max_kv_size && *a.max_kv_size < 1) throw UsageError("--max-kv-size: must be positive");
  parse_template_config(a.chat_template_config);
  check_draft_flags(a);
  check_mtp_flags(a);
  if (a.spec_exact && a.kv_bits) throw UsageError("--spec-exact cannot be combined with --kv-bits (a quantized KV cache)");
  const auto constraint_file = read_constraint_file(a);
  const bool verbose = str2bool(a.verbose);
  // Every rank runs the same generation on its shard (the same flags reach each); rank 0 prints.
  const auto dist_run = join_run(a.dist);
  QuietUnlessPrimary quiet(dist_run.primary());
  if (dist_run.parallel && !a.draft_model.empty())
    throw UnsupportedError("--draft-model is not supported in distributed mode (as in mlx-lm)");

  generate::TextGenerationOptions options;
  options.max_tokens = a.max_tokens;
  options.prefill_step_size = a.prefill_step_size;
  options.max_kv_size = a.max_kv_size;
  options.kv_bits = a.kv_bits;
  options.kv_group_size = a.kv_group_size;
  options.quantized_kv_start = a.quantized_kv_start;

  if (!a.prompt_tokens.empty() && !has_tokenizer_files(a.model)) {
    if (constraint_file)
      throw UsageError(constraint_file->first.substr(0, constraint_file->first.find(' ')) +
                       ": needs a model with a tokenizer (the grammar is matched against token text)");
    return run_ids_only(a, std::move(options), dist_run);
  }
  std::optional<cache::CacheList> prompt_cache;
  if (!a.prompt_cache_file.empty()) prompt_cache = load_cache_file(a);

  auto rng = make_rng(a);
  auto session = load_naming_mtp(a, [&] {
    return load_session(a.model, a.profile_file, a.expert_memory, a.adapter_path, dist_run.parallel,
                        a.expert_prefetch, a.fidelity, row_exact(a), a.mtp);
  });
  // mlx_lm.generate has no distributed mode: the keys are drawn as mlx_lm.chat's sharded_load draws them.
  if (a.seed) rng->skip(sharded_load_draws(a.model, session.loaded, dist_run.parallel.has_value()));
  for (const auto& t : a.extra_eos_token) add_eos_token(session, t, "--extra-eos-token");
  // A saved cache holds the whole model's layers and heads: each rank continues from its part.
  if (prompt_cache && dist_run.parallel)
    prompt_cache = shard_prompt_cache(std::move(*prompt_cache), *dist_run.parallel,
                                      static_cast<int>(model::make_prompt_cache(*session.loaded.model).size()),
                                      a.prompt_cache_file);
  if (prompt_cache) model::check_prompt_cache(*session.loaded.model, *prompt_cache, a.prompt_cache_file);
  auto ids = prompt_ids(a, session, prompt_cache.has_value());
  if (!a.draft_model.empty()) check_draft_tokenizer(a, session.tokenizer);
  auto draft = load_draft(a);
  if (draft) generate::check_speculative_cache(*session.loaded.model, a.spec_exact);

  auto params = a.sampling.sampler;
  params.xtc_special_tokens = xtc_special_tokens(session);
  options.sampler = make_cli_sampler(params, rng);
  options.logits_processors = make_cli_processors(a.sampling, session.loaded.model->vocab_size());
  options.eos_token_ids = session.eos_token_ids;
  if (constraint_file) {
    structured::GrammarEngine engine(session.tokenizer, session.loaded.model->vocab_size(), session.eos_token_ids);
    options.logits_processors.push_back(structured::constraint_processor(
        a.json_schema.empty() ? engine.gbnf(constraint_file->second, constraint_file->first)
                              : engine.json_schema(constraint_file->second, /*strict=*/true, constraint_file->first)));
  }
  if (draft) {
    options.draft_model = draft->loaded.model.get();
    options.num_draft_tokens = a.num_draft_tokens;
  }
  options.mtp = a.mtp;
  if (a.mtp) options.num_draft_tokens = a.num_draft_tokens;

  warm_up_if_asked(a, *session.loaded.model);
  if (verbose) std::cout << "==========\n";
  std::string text;
  std::vector<mx::array> rows;
  std::vector<uint8_t> from_draft;
  int accepted = 0;
  auto last = generate::stream_generate(
      *session.loaded.model, session.tokenizer, ids, options,
      [&](const generate::GenerationResponse& r) {
        if (verbose) std::cout << r.text << std::flush;
        text += r.text;
        accepted += r.from_draft;
        if (!a.logprobs_file.empty() && r.finish_reason != generate::FinishReason::stop) {
          rows.push_back(r.logprobs);
          from_draft.push_back(r.from_draft);
        }
        return true;
      },
      prompt_cache ? &*prompt_cache : nullptr);
  if (dist_run.primary()) write_logprobs(a.logprobs_file, rows, draft || a.mtp ? &from_draft : nullptr);
  if (!verbose) {
    std::cout << text << "\n";
    print_expert_stats(session.experts);
    return;
  }
  std::cout << "\n==========\n";
  if (text.empty()) {
    std::cout << "No text generated for this prompt\n";
  } else {
    print_footer(last);
  }
  if (a.mtp) print_mtp_stats(accepted, last.drafted_tokens);
  std::cout << std::flush;
  print_expert_stats(session.experts);
}

/** mlx_lm.generate flags this engine cannot honour yet: accepted by the parser, refused by name. */
void add_unsupported(CLI::App* cmd, const std::string& name, const std::string& why, bool flag = false) {
  auto check = [name, why](auto&&...) { throw UnsupportedError(name + " is not supported: " + why); };
  if (flag)
    cmd->add_flag_callback(name, [check] { check(); }, "Not supported: " + why);
  else
    cmd->add_option_function<std::vector<std::string>>(name, [check](const std::vector<std::string>&) { check(); },
                                                       "Not supported: " + why);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text with a model (as mlx_lm.generate)");
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "The path to the local model directory or Hugging Face repo (from the local cache; " + convert::default_model_help() + ")");
  add_distributed_flags(cmd, a->dist);
  cmd->add_flag("--trust-remote-code", a->trust_remote_code,
                "Accepted for compatibility (no code from the model directory is ever run)");
  cmd->add_option("--extra-eos-token", a->extra_eos_token, "Add tokens in the list of eos tokens that stop generation.");
  cmd->add_option("--system-prompt", a->system_prompt, "System prompt to be used for the chat template");
  cmd->add_option("--prompt,-p", a->prompt, "Message to be processed by the model ('-' reads from stdin)")
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt as comma-separated token ids (instead of --prompt)");
  cmd->add_option("--prefill-response", a->prefill_response, "Prefill response to be used for the chat template");
  cmd->add_option("--max-tokens,-m", a->max_tokens, "Maximum number of tokens to generate")->capture_default_str();
  add_sampling_flags(cmd, a->sampling, true, true);
  cmd->add_option("--seed", a->seed, "PRNG seed");
  cmd->add_flag("--ignore-chat-template", a->ignore_chat_template,
                "Use the raw prompt without the tokenizer's chat template.");
  cmd->add_flag("--use-default-chat-template", a->use_default_chat_template,
                "Accepted as mlx_lm.generate accepts it (it changes nothing there either)");
  cmd->add_option("--chat-template-config", a->chat_template_config,
                  "Additional config for `apply_chat_template` (a JSON object)");
  cmd->add_option("--verbose", a->verbose, "'True'/'T' to log verbose output, 'False'/'F' to print only the response")
      ->capture_default_str();
  cmd->add_option("--max-kv-size", a->max_kv_size, "Set the maximum key-value cache size");
  cmd->add_option("--expert-memory", a->expert_memory, kExpertMemoryHelp);
  cmd->add_flag("--expert-prefetch", a->expert_prefetch, kExpertPrefetchHelp);
  cmd->add_option("--prefill-step-size", a->prefill_step_size, "Number of prompt tokens to process at a time")
      ->capture_default_str();
  cmd->add_option("--prompt-cache-file", a->prompt_cache_file, "A file containing saved KV caches");
  cmd->add_option("--kv-bits", a->kv_bits, "Number of bits for KV cache quantization");
  cmd->add_option("--kv-group-size", a->kv_group_size, "Group size for KV cache quantization")->capture_default_str();
  cmd->add_option("--quantized-kv-start", a->quantized_kv_start,
                  "When --kv-bits is set, start quantizing the KV cache from this step onwards")
      ->capture_default_str();
  cmd->add_option("--logprobs-file", a->logprobs_file,
                  "Write every generated token's logprobs [T, vocab] to this .safetensors file");
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  add_fidelity_flag(cmd, a->fidelity);
  cmd->add_option("--adapter-path", a->adapter_path, kAdapterPathHelp);
  cmd->add_option("--json-schema", a->json_schema,
                  "Constrain the output to JSON valid against this JSON schema file (strict: no properties it does not name)");
  cmd->add_option("--grammar", a->grammar, "Constrain the output to this GBNF grammar file (start rule `root`)");
  add_unsupported(cmd, "--image", "this engine runs text-only models");
  cmd->add_option("--draft-model", a->draft_model, "A model to be used for speculative decoding.");
  cmd->add_flag("--spec-exact", a->spec_exact,
                "Compute every position as a one-token decoding step does, so the tokens (greedy) equal decoding "
                "one token at a time, whatever the prefill chunks and with any --draft-model (ours; CPU)");
  cmd->add_flag("--mtp", a->mtp,
                "Speculative decoding with the model's own multi-token-prediction head (Qwen3.5 / Qwen3-Next "
                "checkpoints that keep their mtp.* tensors), --num-draft-tokens per step; greedy runs exact, as "
                "--spec-exact (ours; vLLM's speculative method 'mtp')");
  cmd->add_flag("--warm-up", a->warm_up,
                "Before the prompt, run one prompt per 256-token bucket up to --prefill-step-size, so the prompt "
                "pays no per-length setup (MLX's CUDA backend; reported on stderr; ours)");
  cmd->add_option("--num-draft-tokens", a->num_draft_tokens,
                  "Number of tokens to draft when using speculative decoding.")
      ->capture_default_str();
  add_unsupported(cmd, "--quantize-activations", "this engine has no activation quantization", true);
  cmd->callback([a] {
    a->model = convert::resolve_model_flag(a->model);
    run(*a);
  });
}

}  // namespace mlxrt::cli
