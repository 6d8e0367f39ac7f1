// `mlxrt chat`: the REPL of mlx_lm.chat (mlx_lm/chat.py @ mlx-lm 0.32.2): the same flags and
// defaults, the same screen, one KV cache kept across turns (each turn appends the newly rendered
// messages to it), `q` quits, `r` resets the cache, `h` shows the commands.
#include <cstdio>
#include <iostream>

#include "mlxrt/cli/chat_ui.h"
#include "mlxrt/cli/generation_setup.h"
#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/cli/interrupt.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/convert/default_model.h"
#include "mlxrt/convert/default_model.h"
#include "mlxrt/generate/prefill_warm_up.h"
#include "mlxrt/generate/text_generation.h"
#include "mlxrt/model/make_prompt_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace {

struct ChatArgs {
  std::string model, system_prompt, profile_file, adapter_path;
  bool has_system_prompt = false, trust_remote_code = false;
  double temp = 0.0, top_p = 1.0, xtc_probability = 0.0, xtc_threshold = 0.1;
  uint64_t seed = 0;
  std::optional<int> max_kv_size;
  std::optional<double> expert_memory;
  bool expert_prefetch = false;
  bool warm_up = false;  // --warm-up
  int prefill_step_size = 2048, max_tokens = 256;
  DistributedArgs dist;
  model::FidelityTier fidelity = model::FidelityTier::l1;  // --fidelity
};

/** sp[:57] + "..." for a system prompt over 60 characters (code points, as Python counts). */
std::string shorten(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  if (starts.size() <= 60) return s;
  return s.substr(0, starts[57]) + "...";
}

void run(const ChatArgs& a) {
  generate::SamplerParams params;
  params.temp = a.temp;
  params.top_p = a.top_p;
  params.xtc_probability = a.xtc_probability;
  params.xtc_threshold = a.xtc_threshold;
  if (auto p = generate::check_sampler_params(params)) {
    SamplingFlags f;
    f.sampler = params;
    check_sampling_flags(f);  // throws naming the flag
  }
  if (a.max_tokens == 0) throw UsageError("--max-tokens: must be non-zero (use -1 for no limit)");
  if (a.prefill_step_size <= 0) throw UsageError("--prefill-step-size: must be positive");

  // As mlx_lm.chat under mlx.launch: every rank reads the same input (the launcher copies stdin to
  // each) and runs the same turns on its shard; rank 0 prints.
  const auto dist_run = join_run(a.dist);
  QuietUnlessPrimary quiet(dist_run.primary());

  // mx.random.seed(args.seed) comes before the model is built.
  auto rng = std::make_shared<generate::RandomState>(a.seed);
  rng->skip(model_construction_draws(a.model) + adapter_construction_draws(a.adapter_path));
  auto session = load_session(a.model, a.profile_file, a.expert_memory, a.adapter_path, dist_run.parallel,
                              a.expert_prefetch, a.fidelity);
  rng->skip(sharded_load_draws(a.model, session.loaded, dist_run.parallel.has_value()));
  if (!session.chat_template) throw UsageError("--model: " + a.model + " has no chat template to chat with");
  params.xtc_special_tokens = xtc_special_tokens(session);

  // The first turn's prompt (a fresh cache) then runs at a warm process's speed; later turns
  // continue the cache at other offsets.
  if (a.warm_up)
    std::cerr << generate::describe(generate::warm_up_prefill_shapes(*session.loaded.model, a.prefill_step_size,
                                                                     a.max_kv_size))
              << std::endl;
  ChatUI ui;
  std::vector<std::pair<std::string, std::string>> rows = {{"model", a.model},
                                                           {"max tokens", with_thousands(a.max_tokens)}};
  if (!a.system_prompt.empty()) rows.push_back({"system", shorten(a.system_prompt)});
  ui.header("mlx_lm.chat", rows);
  ui.help();

  auto cache = model::make_prompt_cache(*session.loaded.model, a.max_kv_size);
  std::string query;
  // Ctrl-C stops the answer being written (the conversation so far stays in the cache); at the
  // prompt, a Ctrl-C right after another one quits.
  InterruptGuard interrupts;
  bool armed = false;
  while (true) {
    ui.before_input();
    bool got = static_cast<bool>(std::getline(std::cin, query));
    ui.after_input();
    if (!got && interrupts.take()) {
      std::cin.clear();
      std::clearerr(stdin);
      if (armed) {
        ui.say_bye();
        break;
      }
      armed = true;
      ui.say_interrupted("ctrl-c", "press Ctrl-C again to quit, or type q");
      continue;
    }
    interrupts.take();  // one that came while the line was being typed is not for the answer
    armed = false;
    if (!got || query == "q") {  // end of input quits too
      ui.say_bye();
      break;
    }
    if (query == "r") {
      cache = model::make_prompt_cache(*session.loaded.model, a.max_kv_size);
      ui.say_reset();
      continue;
    }
    if (query == "h") {
      ui.help();
      continue;
    }
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (a.has_system_prompt) messages.push_back({{"role", "system"}, {"content", a.system_prompt}});
    messages.push_back({{"role", "user"}, {"content", query}});
    auto prompt = apply_chat_template(session, messages, true, false, nlohmann::ordered_json::object());
    auto ids = session.tokenizer.encode(prompt, false);

    generate::TextGenerationOptions options;
    options.max_tokens = a.max_tokens;
    options.prefill_step_size = a.prefill_step_size;
    options.sampler = make_cli_sampler(params, rng);
    options.eos_token_ids = session.eos_token_ids;
    auto last = generate::stream_generate(
        *session.loaded.model, session.tokenizer, ids, options,
        [&](const generate::GenerationResponse& r) {
          ui.stream_text(r.text);
          if (interrupts.take()) armed = true;
          return !armed;
        },
        &cache);
    ui.end_turn(last.generation_tokens, last.generation_tps, last.prompt_tps, last.peak_memory);
    if (armed)
      ui.say_interrupted("stopped", "answer cut short, the conversation is kept; Ctrl-C again at the prompt quits");
    std::cout << std::flush;
    print_expert_stats(session.experts);  // the run so far
  }
}

}  // namespace

void register_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Chat with an LLM (as mlx_lm.chat)");
  auto a = std::make_shared<ChatArgs>();
  cmd->add_option("--model", a->model, "The path to the local model directory or Hugging Face repo (from the local cache; " + convert::default_model_help() + ")");
  cmd->add_flag("--trust-remote-code", a->trust_remote_code,
                "Accepted for compatibility (no code from the model directory is ever run)");
  cmd->add_option("--temp", a->temp, "Sampling temperature")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Sampling top-p")->capture_default_str();
  cmd->add_option("--xtc-probability", a->xtc_probability, "Probability of XTC sampling to happen each next token")
      ->capture_default_str();
  cmd->add_option("--xtc-threshold", a->xtc_threshold,
                  "Thresold the probs of each next token candidate to be sampled by XTC")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "PRNG seed")->capture_default_str();
  cmd->add_option("--max-kv-size", a->max_kv_size, "Set the maximum key-value cache size");
  cmd->add_option("--expert-memory", a->expert_memory, kExpertMemoryHelp);
  cmd->add_flag("--expert-prefetch", a->expert_prefetch, kExpertPrefetchHelp);
  cmd->add_flag("--warm-up", a->warm_up,
                "Before the first turn, run one prompt per 256-token bucket up to --prefill-step-size, so the first "
                "prompt pays no per-length setup (MLX's CUDA backend; reported on stderr; ours)");
  cmd->add_option("--prefill-step-size", a->prefill_step_size, "Number of prompt tokens to process at a time")
      ->capture_default_str();
  cmd->add_option("--max-tokens,-m", a->max_tokens, "Maximum number of tokens to generate")->capture_default_str();
  cmd->add_option("--system-prompt", a->system_prompt, "System prompt to be used for the chat template")
      ->each([a](const std::string&) { a->has_system_prompt = true; });
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  add_fidelity_flag(cmd, a->fidelity);
  cmd->add_option("--adapter-path", a->adapter_path, kAdapterPathHelp);
  add_distributed_flags(cmd, a->dist);
  cmd->callback([a] {
    a->model = convert::resolve_model_flag(a->model);
    run(*a);
  });
}

}  // namespace mlxrt::cli
