// `mlxrt batch-generate --model DIR --requests FILE [--max-tokens N] [--seed S] [sampling flags]
// [--completion-batch-size N] [--prefill-batch-size N] [--prefill-step-size N]` runs a set of
// prompts as one batch, as mlx-lm's batch_generate / BatchGenerator does (port of batch_generate
// in mlx_lm/generate.py, mlx-lm 0.32.2). FILE is JSON: {"requests": [{"prompt_tokens": [ids],
// "max_tokens": N, "sampler": {make_sampler's arguments}, "logits_processors":
// {make_logits_processors's arguments}}, ...]}; a request without "sampler" or
// "logits_processors" takes the flags' (the generator's defaults). Prints one JSON line per
// request, in order: {"tokens": [...], "logprobs": [...], "finish_reason": ...} (the stop token
// left out, as batch_generate does), and the throughput on stderr. With --batch-invariant (ours)
// each row equals its solo `mlxrt generate` run (tokens and logprobs), and a request may carry
// "seed": N, its sampler then drawing as `mlxrt generate --seed N` does. --step-log FILE (ours)
// records each step's wall time, --step-graph FILE one step's op graph, --step-timing the decode
// steps' build / dispatch / wait split (as `benchmark --step-timing`), for
// bench/batch_generate_bench.py, and each prefilling step's split (as the server's DEBUG line).
// --adapters NAME=DIR ... (ours) loads mlx_lm.lora adapters beside
// the model and a request's "adapter": NAME runs its row with that adapter, rows of different
// adapters in one batch: each row's tokens equal those of the same batch run with every row on
// that row's adapter.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include <mlx/graph_utils.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>
#include <nlohmann/json.hpp>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/cli/generation_setup.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/generate/batch_generator.h"
#include "mlxrt/io/model_dir.h"
#include "mlxrt/util/cuda_graphs.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::cli {

namespace {

struct BatchArgs {
  std::string model;
  std::string requests;
  int max_tokens = 128;
  std::optional<uint64_t> seed;
  SamplingFlags sampling;
  int completion_batch_size = 32;
  int prefill_batch_size = 8;
  int prefill_step_size = 2048;
  bool batch_invariant = false;
  bool prompts_first = false;  // --batch-order: mlx-lm's by default, as batch_generate runs
  bool first_tokens_early = false;  // --first-tokens: pipelined by default, as batch_generate runs
  std::string step_log;
  std::string step_graph;
  bool step_timing = false;
  std::vector<std::string> adapters;
  DistributedArgs dist;
  model::FidelityTier fidelity = model::FidelityTier::l1;  // --fidelity
};

using ojson = nlohmann::ordered_json;
namespace mx = mlx::core;

model::LoadOptions adapter_load_options(const BatchArgs& a) {
  auto options = load_options("");
  options.fidelity = a.fidelity;
  return options;
}

/** A typed read of one field of a requests-file object; errors name `where.key`. */
struct FieldReader {
  const std::string& where;
  const std::string& key;
  const ojson& value;
  double number() const {
    if (!value.is_number()) throw UsageError(where + "." + key + ": expected a number");
    return value.get<double>();
  }
  int integer() const {
    if (!value.is_number_integer()) throw UsageError(where + "." + key + ": expected an integer");
    return value.get<int>();
  }
};

generate::SamplerParams sampler_params(const ojson& o, const std::string& where) {
  generate::SamplerParams p;
  if (!o.is_object()) throw UsageError(where + ": expected an object of make_sampler arguments");
  for (auto it = o.begin(); it != o.end(); ++it) {
    const auto& k = it.key();
    const auto& v = it.value();
    const FieldReader f{where, k, v};
    if (k == "temp") p.temp = f.number();
    else if (k == "top_p") p.top_p = f.number();
    else if (k == "min_p") p.min_p = f.number();
    else if (k == "min_tokens_to_keep") p.min_tokens_to_keep = f.integer();
    else if (k == "top_k") p.top_k = f.integer();
    else if (k == "xtc_probability") p.xtc_probability = f.number();
    else if (k == "xtc_threshold") p.xtc_threshold = f.number();
    else throw UsageError(where + ": unknown make_sampler argument '" + k + "'");
  }
  return p;
}

generate::LogitsProcessorParams processor_params(const ojson& o, const std::string& where) {
  generate::LogitsProcessorParams p;
  if (!o.is_object()) throw UsageError(where + ": expected an object of make_logits_processors arguments");
  for (auto it = o.begin(); it != o.end(); ++it) {
    const auto& k = it.key();
    const auto& v = it.value();
    const FieldReader f{where, k, v};
    if (k == "repetition_penalty") p.repetition_penalty = f.number();
    else if (k == "repetition_context_size") p.repetition_context_size = f.integer();
    else if (k == "presence_penalty") p.presence_penalty = f.number();
    else if (k == "presence_context_size") p.presence_context_size = f.integer();
    else if (k == "frequency_penalty") p.frequency_penalty = f.number();
    else if (k == "frequency_context_size") p.frequency_context_size = f.integer();
    else if (k == "logit_bias") p.logit_bias = generate::parse_logit_bias(v, where + ".logit_bias");
    else throw UsageError(where + ": unknown make_logits_processors argument '" + k + "'");
  }
  return p;
}

void run_batch_generate(const BatchArgs& a) {
  prefer_direct_kernel_launches();  // batched decode steps (cuda_graphs.h); before any GPU work
  check_sampling_flags(a.sampling);
  ojson doc;
  try {
    doc = ojson::parse(read_text_file(a.requests));
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError("--requests " + a.requests + ": not valid JSON (" + e.what() + ")");
  }
  if (!doc.is_object() || !doc.contains("requests") || !doc["requests"].is_array() || doc["requests"].empty())
    throw UsageError("--requests " + a.requests + ": expected {\"requests\": [ ... ]} with at least one request");

  // --adapters: one mixed-adapter model whose rows each run the adapter their request names.
  std::vector<std::pair<std::string, std::filesystem::path>> adapters;
  for (const auto& [name, dir] : parse_adapter_specs(a.adapters)) adapters.emplace_back(name, dir);
  model::check_adapter_names(adapters);
  // Every rank runs the same batch on its shard of the model, step for step (the same requests,
  // the same greedy or seeded choices); rank 0 prints.
  const auto dist_run = join_run(a.dist);
  QuietUnlessPrimary quiet(dist_run.primary());
  if (dist_run.parallel && !adapters.empty())
    throw UnsupportedError("--adapters is not supported in distributed mode");
  std::shared_ptr<model::nn::ExpertStore> experts;
  auto adapted = adapters.empty()
                     ? model::AdaptedModels{load_cli_model(a.model, "", std::nullopt, experts, "", dist_run.parallel,
                                                           false, a.fidelity),
                                            {}, nullptr, nullptr, {}}
                     : model::load_model_with_adapters(io::resolve_model_dir(a.model), adapter_load_options(a),
                                                       adapters);
  if (!adapters.empty() && !adapted.mixed)
    throw UnsupportedError("--adapters: these adapters cannot share a batch: " + adapted.mixed_unavailable);
  const auto& loaded = adapted.base;
  auto& model = adapted.mixed ? *adapted.mixed : *loaded.model;
  const auto& eos = loaded.config.eos_token_ids();
  const int vocab = model.vocab_size();
  auto rng = std::make_shared<generate::RandomState>();
  if (a.seed) {
    rng->seed(*a.seed);
    // Distributed, the keys are drawn as mlx-lm's sharded_load draws them (as generate does).
    rng->skip(model_construction_draws(a.model) +
              sharded_load_draws(a.model, loaded, dist_run.parallel.has_value()));
  }

  generate::BatchGeneratorOptions options;
  options.max_tokens = a.max_tokens;
  for (int32_t id : eos) options.stop_tokens.push_back({id});
  auto params = a.sampling.sampler;
  params.xtc_special_tokens = eos;  // the config's eos ids (mlx-lm adds encode("\n") with a tokenizer)
  if (params.temp != 0) options.sampler = std::make_shared<const generate::Sampler>(make_cli_sampler(params, rng));
  options.completion_batch_size = a.completion_batch_size;
  options.prefill_batch_size = a.prefill_batch_size;
  options.prefill_step_size = a.prefill_step_size;
  options.batch_invariant = a.batch_invariant;
  options.prompts_first = a.prompts_first;
  options.first_tokens_early = a.first_tokens_early;
  options.adapter_rows = adapted.rows;
  options.sample_streams = generate::make_sample_streams();
  auto default_processors = make_cli_processors(a.sampling, vocab);
  const auto default_bias_only = generate::logit_bias_only(cli_processor_params(a.sampling));

  std::vector<generate::BatchRequest> requests;
  int index = 0;
  for (const auto& r : doc["requests"]) {
    const std::string where = "--requests " + a.requests + ": requests[" + std::to_string(index++) + "]";
    if (!r.is_object() || !r.contains("prompt_tokens") || !r["prompt_tokens"].is_array())
      throw UsageError(where + ": expected an object with \"prompt_tokens\": [ids]");
    generate::BatchRequest req;
    for (const auto& id : r["prompt_tokens"]) {
      if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() >= vocab)
        throw UsageError(where + ".prompt_tokens: ids must be integers in [0, " + std::to_string(vocab) + ")");
      req.prompt.push_back(id.get<int32_t>());
    }
    if (r.contains("max_tokens")) {
      if (!r["max_tokens"].is_number_integer()) throw UsageError(where + ".max_tokens: expected an integer");
      req.max_tokens = r["max_tokens"].get<int>();
    }
    // A request's own "seed" (--batch-invariant only) gives its sampler its own PRNG, seeded as
    // `mlxrt generate --seed` seeds it (after the model constructor's draws), so its draws are the
    // solo run's. mlx-lm's batch has no such field: its rows draw from one shared PRNG.
    auto row_rng = rng;
    if (r.contains("seed")) {
      if (!a.batch_invariant)
        throw UsageError(where + ".seed: a per-request seed needs --batch-invariant (mlx-lm's batch draws every "
                         "row from one PRNG)");
      if (!r["seed"].is_number_unsigned()) throw UsageError(where + ".seed: expected a non-negative integer");
      row_rng = std::make_shared<generate::RandomState>();
      row_rng->seed(r["seed"].get<uint64_t>());
      row_rng->skip(model_construction_draws(a.model) +
                    sharded_load_draws(a.model, loaded, dist_run.parallel.has_value()));
    }
    if (r.contains("sampler")) {
      auto p = sampler_params(r["sampler"], where + ".sampler");
      req.sampler = std::make_shared<const generate::Sampler>(generate::make_sampler(p, row_rng));
      req.greedy_sampler = p.temp == 0;
    } else if (row_rng != rng && params.temp != 0) {
      req.sampler = std::make_shared<const generate::Sampler>(make_cli_sampler(params, row_rng));
    }
    if (r.contains("logits_processors")) {
      const auto p = processor_params(r["logits_processors"], where + ".logits_processors");
      req.logits_processors = generate::make_logits_processors(p, vocab);
      req.logit_bias_only = generate::logit_bias_only(p);
    } else {
      req.logits_processors = default_processors;
      req.logit_bias_only = default_bias_only;
    }
    if (r.contains("adapter")) {
      if (!r["adapter"].is_string()) throw UsageError(where + ".adapter: expected an adapter name (a string)");
      const auto name = r["adapter"].get<std::string>();
      auto it = std::find_if(adapters.begin(), adapters.end(), [&](const auto& p) { return p.first == name; });
      if (!name.empty() && it == adapters.end())
        throw UsageError(where + ".adapter: '" + name + "' is not one of --adapters" +
                         (adapters.empty() ? std::string(" (none given)") : ""));
      req.adapter_slot = name.empty() ? 0 : static_cast<int>(it - adapters.begin()) + 1;
    }
    requests.push_back(std::move(req));
  }

  // --step-graph: the op graph of the fourth decode step (past the first steps' special cases), as DOT.
  if (!a.step_graph.empty() && dist_run.primary()) {
    options.inspect_step = [path = a.step_graph, n = 0](const std::vector<mx::array>& outputs) mutable {
      if (++n != 4) return;
      std::ofstream out(path);
      if (!out) throw UsageError("--step-graph " + path + ": cannot open for writing");
      mx::export_to_dot(out, outputs);
    };
  }
  generate::StepTiming timing;
  if (a.step_timing) options.step_timing = &timing;
  generate::BatchGenerator gen(model, options);
  auto uids = gen.insert(std::move(requests));
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, std::vector<double>> logprobs;
  std::map<int, std::string> finish;
  size_t generated = 0;
  // The sampled tokens' logprobs are read one step late: evaluating them at once would wait for the
  // step the generator has already queued behind them, and the host would stop running ahead.
  std::vector<std::pair<int, mx::array>> pending;
  auto read_pending = [&] {
    for (auto& [uid, lp] : pending) logprobs[uid].push_back(static_cast<double>(lp.item<float>()));
    pending.clear();
  };
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> step_log(nullptr, std::fclose);
  if (!a.step_log.empty() && dist_run.primary()) {
    step_log.reset(std::fopen(a.step_log.c_str(), "w"));
    if (!step_log) throw UsageError("--step-log " + a.step_log + ": cannot open for writing");
  }
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  while (true) {
    // next_generated(), with each prefilling step's split on stderr under --step-timing (where time
    // to first token goes: the prefill's build, wait and dispatch, the rows' first step).
    auto [prompt_responses, responses] = gen.next();
    if (a.step_timing && !prompt_responses.empty() && dist_run.primary())
      std::fprintf(stderr, "[batch_generate] prefilling step: %zu prompts, %zu tokens generated (%s ms)\n",
                   prompt_responses.size(), responses.size(), gen.describe_last_split().c_str());
    if (responses.empty() && !prompt_responses.empty()) continue;
    read_pending();
    if (responses.empty()) break;
    if (step_log) {
      const auto now = std::chrono::steady_clock::now();
      std::fprintf(step_log.get(), "%zu %.3f\n", responses.size(),
                   std::chrono::duration<double, std::milli>(now - last).count());
      last = now;
    }
    std::vector<mx::array> queued;
    for (auto& r : responses) {
      if (r.finish_reason) finish[r.uid] = *r.finish_reason;
      if (r.finish_reason != std::optional<std::string>("stop")) {
        tokens[r.uid].push_back(r.token);
        pending.emplace_back(r.uid, mx::astype(mx::take(r.logprobs, mx::array(r.token)), mx::float32));
        queued.push_back(pending.back().second);
      }
      ++generated;
    }
    mx::async_eval(queued);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int uid : uids) {
    ojson line = {{"tokens", tokens[uid]}, {"logprobs", logprobs[uid]}, {"finish_reason", finish[uid]}};
    std::cout << line.dump() << "\n";
  }
  std::cout.flush();
  if (dist_run.primary()) {
    std::fprintf(stderr, "[batch_generate] %zu sequences, %zu tokens in %.3f s, %.3f tokens-per-sec\n", uids.size(),
                 generated, seconds, seconds > 0 ? static_cast<double>(generated) / seconds : 0.0);
    if (a.step_timing && timing.steps > 0)
      std::fprintf(stderr,
                   "[batch_generate] decode step: build=%.3f ms, dispatch=%.3f ms, wait=%.3f ms (mean of %d steps)\n",
                   1e3 * timing.build_s / timing.steps, 1e3 * timing.dispatch_s / timing.steps,
                   1e3 * timing.wait_s / timing.steps, timing.steps);
  }
}

}  // namespace

void register_batch_generate(CLI::App& app) {
  auto a = std::make_shared<BatchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "batch-generate", "Generate for several prompts as one batch (mlx-lm's batch_generate / BatchGenerator)");
  cmd->add_option("--model", a->model, "The path to the local model directory or Hugging Face repo")->required();
  cmd->add_option("--requests", a->requests,
                  "JSON file {\"requests\": [{\"prompt_tokens\": [...], \"max_tokens\": N, \"sampler\": {...}, "
                  "\"logits_processors\": {...}}, ...]}")
      ->required();
  cmd->add_option("--max-tokens,-m", a->max_tokens, "Default maximum number of tokens per request")->capture_default_str();
  cmd->add_option("--seed", a->seed, "PRNG seed");
  add_sampling_flags(cmd, a->sampling, true, true);
  cmd->add_option("--completion-batch-size", a->completion_batch_size, "Most sequences decoded together")
      ->capture_default_str();
  cmd->add_option("--prefill-batch-size", a->prefill_batch_size, "Most sequences prefilled together")
      ->capture_default_str();
  cmd->add_option("--prefill-step-size", a->prefill_step_size, "Number of prompt tokens to process at a time")
      ->capture_default_str();
  add_batch_order_option(cmd, a->prompts_first);
  add_first_tokens_option(cmd, a->first_tokens_early);
  cmd->add_flag("--batch-invariant", a->batch_invariant,
                "Each request's tokens and logprobs equal its solo `generate` run whatever it is batched with "
                "(each row runs its own forward); a request may then carry its own \"seed\"");
  cmd->add_option("--adapters", a->adapters,
                  "NAME=DIR ...: mlx_lm.lora adapters; a request's \"adapter\": NAME runs its row with that adapter, "
                  "in the same batch as rows of other adapters and of the plain model (ours)");
  cmd->add_option("--step-log", a->step_log,
                  "Write one line per decode step to this file: the rows it answered and its wall time in ms");
  cmd->add_option("--step-graph", a->step_graph, "Write the op graph of one batched decode step to this file (DOT)");
  cmd->add_flag("--step-timing", a->step_timing,
                "Also print where a batched decode step's time goes: building its graph, dispatching it (MLX "
                "encoding the kernels), and waiting on the device; and each prefilling step's split");
  add_fidelity_flag(cmd, a->fidelity);
  add_distributed_flags(cmd, a->dist);
  cmd->callback([a] { run_batch_generate(*a); });
}

}  // namespace mlxrt::cli
