// `mlxrt benchmark`: mlx_lm.benchmark (mlx_lm/benchmark.py @ mlx-lm 0.32.2): the same flags, the
// same random prompts (seed 0 before the model is built, then randint over the vocabulary), eos
// disabled, one warm-up run, then the timed trials and their averages in the same format. With
// --batch-size above 1, as mlx-lm, the batch's rows through a BatchGenerator (batch_generate's
// stats: prompt tokens over the time spent on prompts, generated tokens over the rest of the wall
// time).
#include <chrono>
#include <cstdio>
#include <thread>

#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/cli/generation_setup.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/convert/default_model.h"
#include "mlxrt/generate/batch_generator.h"
#include "mlxrt/generate/text_generation.h"
#include "mlxrt/util/cuda_graphs.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace mx = mlx::core;

namespace {

struct BenchArgs {
  std::string model, profile_file, adapter_path;
  int prompt_tokens = 512, generation_tokens = 1024, batch_size = 1, num_trials = 5;
  int prefill_step_size = 2048, delay = 0;
  bool trust_remote_code = false;
  bool step_timing = false;  // --step-timing
  DistributedArgs dist;
  model::FidelityTier fidelity = model::FidelityTier::l1;  // --fidelity
};

void run(const BenchArgs& a) {
  if (a.prompt_tokens < 1) throw UsageError("--prompt-tokens: must be positive");
  if (a.generation_tokens < 1) throw UsageError("--generation-tokens: must be positive");
  if (a.batch_size < 1) throw UsageError("--batch-size: must be positive");
  if (a.num_trials < 1) throw UsageError("--num-trials: must be positive");
  if (a.prefill_step_size <= 0) throw UsageError("--prefill-step-size: must be positive");
  if (a.delay < 0) throw UsageError("--delay: must be non-negative");

  if (a.batch_size > 1) prefer_direct_kernel_launches();  // batched decode steps (cuda_graphs.h); before any GPU work
  // As mlx_lm.benchmark under mlx.launch: every rank runs the trials on its shard; rank 0 reports.
  const auto dist_run = join_run(a.dist);
  QuietUnlessPrimary quiet(dist_run.primary());
  generate::RandomState rng(0);
  rng.skip(model_construction_draws(a.model) + adapter_construction_draws(a.adapter_path));
  auto session = load_session(a.model, a.profile_file, std::nullopt, a.adapter_path, dist_run.parallel, false,
                              a.fidelity);
  rng.skip(sharded_load_draws(a.model, session.loaded, dist_run.parallel.has_value()));
  const int vocab = session.loaded.model->vocab_size();
  auto prompts = mx::random::randint(mx::array(0), mx::array(vocab), {a.batch_size, a.prompt_tokens}, mx::int32,
                                     rng.next());
  auto row = mx::astype(mx::slice(prompts, {0, 0}, {1, a.prompt_tokens}), mx::int32);
  mx::eval(row);
  std::vector<int32_t> prompt(row.data<int32_t>(), row.data<int32_t>() + a.prompt_tokens);
  auto all = mx::astype(prompts, mx::int32);
  mx::eval(all);

  generate::StepTiming timing;
  // mlx-lm's batch_generate over the batch's prompts: the window's prompt tokens and the time its
  // generator spent on prompts (admitting them, their prefill, their rows' first step), the tokens
  // it generated over the wall time less that.
  auto batch_bench = [&] {
    timing = {};
    generate::BatchGeneratorOptions options;
    if (a.step_timing) options.step_timing = &timing;
    options.max_tokens = a.generation_tokens;
    options.prefill_step_size = a.prefill_step_size;
    generate::BatchGenerator gen(*session.loaded.model, options);
    std::vector<generate::BatchRequest> requests(a.batch_size);
    for (int b = 0; b < a.batch_size; ++b)
      requests[b].prompt.assign(all.data<int32_t>() + static_cast<size_t>(b) * a.prompt_tokens,
                                all.data<int32_t>() + static_cast<size_t>(b + 1) * a.prompt_tokens);
    const auto start = std::chrono::steady_clock::now();
    gen.insert(std::move(requests));
    double prompt_s = 0;
    size_t generated = 0;
    while (true) {
      auto [prompt_responses, responses] = gen.next();
      const auto& split = gen.last_split();
      prompt_s += (split.admit_ms + split.start_ms + split.prefill_ms) / 1e3;
      if (responses.empty() && prompt_responses.empty()) break;
      generated += responses.size();
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    generate::GenerationResponse r{.logprobs = mx::array(0.0f)};
    r.prompt_tokens = a.batch_size * a.prompt_tokens;
    r.prompt_tps = prompt_s > 0 ? r.prompt_tokens / prompt_s : 0.0;
    r.generation_tokens = static_cast<int>(generated);
    r.generation_tps = wall > prompt_s ? static_cast<double>(generated) / (wall - prompt_s) : 0.0;
    r.peak_memory = mx::get_peak_memory() / 1e9;
    return r;
  };
  auto bench = [&] {
    if (a.batch_size > 1) return batch_bench();
    timing = {};
    generate::TextGenerationOptions options;
    if (a.step_timing) options.step_timing = &timing;
    options.max_tokens = a.generation_tokens;
    options.prefill_step_size = a.prefill_step_size;
    options.eos_token_ids = std::vector<int32_t>{};  // no early stop
    return generate::stream_generate(*session.loaded.model, session.tokenizer, prompt, options, {});
  };

  std::printf("Running warmup..\n");
  std::fflush(stdout);
  bench();
  std::printf("Timing with prompt_tokens=%d, generation_tokens=%d, batch_size=%d.\n", a.prompt_tokens,
              a.generation_tokens, a.batch_size);
  std::fflush(stdout);
  double sum_prompt = 0, sum_gen = 0, sum_mem = 0;
  for (int i = 0; i < a.num_trials; ++i) {
    if (a.delay > 0) std::this_thread::sleep_for(std::chrono::seconds(a.delay));
    auto tic = std::chrono::steady_clock::now();
    auto r = bench();
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - tic).count();
    std::printf("Trial %d:  prompt_tps=%.3f, generation_tps=%.3f, peak_memory=%.3f, total_time=%.3f\n", i + 1,
                r.prompt_tps, r.generation_tps, r.peak_memory, total);
    std::fflush(stdout);
    if (a.step_timing && timing.steps > 0)
      std::printf("Trial %d decode step: build=%.3f ms, dispatch=%.3f ms, wait=%.3f ms (mean of %d steps)\n", i + 1,
                  1e3 * timing.build_s / timing.steps, 1e3 * timing.dispatch_s / timing.steps,
                  1e3 * timing.wait_s / timing.steps, timing.steps);
    sum_prompt += r.prompt_tps;
    sum_gen += r.generation_tps;
    sum_mem += r.peak_memory;
  }
  std::printf("Averages: prompt_tps=%.3f, generation_tps=%.3f, peak_memory=%.3f\n", sum_prompt / a.num_trials,
              sum_gen / a.num_trials, sum_mem / a.num_trials);
}

}  // namespace

void register_benchmark(CLI::App& app) {
  auto* cmd = app.add_subcommand("benchmark", "Benchmark prompt processing and generation (as mlx_lm.benchmark)");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("--model", a->model, "The path to the local model directory or Hugging Face repo (from the local cache; " + convert::default_model_help() + ")");
  cmd->add_option("--prompt-tokens,-p", a->prompt_tokens, "Length of prompt")->capture_default_str();
  cmd->add_option("--generation-tokens,-g", a->generation_tokens, "Length of completion")->capture_default_str();
  cmd->add_option("--batch-size,-b", a->batch_size, "Batch size")->capture_default_str();
  cmd->add_option("--num-trials,-n", a->num_trials, "Number of timing trials")->capture_default_str();
  cmd->add_option("--prefill-step-size", a->prefill_step_size, "Step size for prefill processing")
      ->capture_default_str();
  cmd->add_flag("--step-timing", a->step_timing,
                "Also print where a decode step's time goes: building its graph, dispatching it (MLX encoding "
                "the kernels), and waiting on the device");
  cmd->add_option("--delay", a->delay, "Delay between each test in seconds")->capture_default_str();
  cmd->add_flag("--trust-remote-code", a->trust_remote_code,
                "Accepted for compatibility (no code from the model directory is ever run)");
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  add_fidelity_flag(cmd, a->fidelity);
  cmd->add_option("--adapter-path", a->adapter_path, kAdapterPathHelp);
  add_distributed_flags(cmd, a->dist);
  cmd->add_flag_callback(
      "--quantize-activations",
      [] { throw UnsupportedError("--quantize-activations is not supported: this engine has no activation quantization"); },
      "Not supported: this engine has no activation quantization");
  cmd->callback([a] {
    a->model = convert::resolve_model_flag(a->model);
    run(*a);
  });
}

}  // namespace mlxrt::cli
