// `mlxrt server` (alias `serve`): mlx_lm.server's command, with its flags and defaults.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <thread>

#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/convert/default_model.h"
#include "mlxrt/generate/speculative.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/server.h"
#include "mlxrt/util/cuda_graphs.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace {

struct Args {
  server::ServerOptions o;
  std::string adapter_path, draft_model, allowed_origins = "*", log_level = "INFO";
  std::string chat_template_args = "{}", prompt_cache_bytes, prefill_buffer_cache = "1G";
  bool trust_remote_code = false, no_chat_page = false;
  DistributedArgs dist;
  int kv_bits = 0;
  std::optional<double> expert_memory;
  bool expert_prefetch = false;
  std::vector<std::string> adapters;
};

// Written by the SIGINT/SIGTERM handler, read by the thread that stops the server.
int stop_pipe[2] = {-1, -1};

void on_stop_signal(int) {
  const char stop = 1;
  [[maybe_unused]] auto n = ::write(stop_pipe[1], &stop, 1);  // async-signal-safe
}

/** mlx-lm's _parse_size: a byte count with an optional K/M/G/T suffix (powers of 1000). */
size_t parse_size(const std::string& text, const std::string& flag = "--prompt-cache-bytes") {
  static const std::pair<const char*, double> kUnits[] = {{"", 1}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
                                                          {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
  std::string t = text;
  for (auto& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = used ? t.substr(used) : "?";
  for (auto [name, scale] : kUnits)
    if (used && unit == name && value >= 0) return static_cast<size_t>(value * scale);
  throw UsageError(flag + ": expected a size such as 512M or 8G, got '" + text + "'");
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t p; (p = s.find(',', start)) != std::string::npos; start = p + 1) out.push_back(s.substr(start, p - start));
  out.push_back(s.substr(start));
  return out;
}

void run(Args& a) {
  // Batched decode steps launch their kernels directly (cuda_graphs.h); before any GPU work.
  prefer_direct_kernel_launches();
  // Under mlx.launch (or mlxrt launch), as mlx_lm.server: rank 0 serves HTTP, the other ranks run
  // its requests on their parts of the model.
  const auto dist_run = join_run(a.dist);
  if (dist_run.parallel && (!a.draft_model.empty() || !a.adapter_path.empty() || !a.adapters.empty()))
    throw UsageError("--draft-model, --adapter-path and --adapters cannot be used when the server runs distributed "
                     "(as mlx_lm.server: adapters and draft models are not supported in distributed mode)");
  if (dist_run.parallel) a.o.parallel = std::make_shared<const model::Parallel>(*dist_run.parallel);
  a.o.ring_peers = dist_run.group.ring_peers();
  if (a.o.row_exact) a.o.batch_invariant = true;  // a batch's rows each run alone, as one-token steps
  a.o.draft_model = a.draft_model;
  if (a.o.mtp) {
    if (!a.draft_model.empty()) throw UsageError("--mtp and --draft-model: choose one drafter");
    if (dist_run.parallel) throw UsageError("--mtp is not supported when the server runs distributed");
    if (!a.adapters.empty()) throw UsageError("--mtp cannot be combined with --adapters");
    if (a.o.num_draft_tokens < 1 || a.o.num_draft_tokens > generate::kMaxDraftTokens)
      throw UsageError("--num-draft-tokens: must be between 1 and " + std::to_string(generate::kMaxDraftTokens) +
                       " (got " + std::to_string(a.o.num_draft_tokens) + ")");
  }
  if (!a.draft_model.empty() && (a.o.num_draft_tokens < 0 || a.o.num_draft_tokens > generate::kMaxDraftTokens))
    throw UsageError("--num-draft-tokens: must be between 0 and " + std::to_string(generate::kMaxDraftTokens) +
                     " (got " + std::to_string(a.o.num_draft_tokens) + ")");
  a.o.allowed_origins = split_commas(a.allowed_origins);
  a.o.chat_page = !a.no_chat_page;
  a.o.log_level = server::parse_log_level(a.log_level);
  try {
    a.o.chat_template_args = nlohmann::ordered_json::parse(a.chat_template_args);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(std::string("--chat-template-args: not valid JSON: ") + e.what());
  }
  if (!a.o.chat_template_args.is_object()) throw UsageError("--chat-template-args: expected a JSON object");
  if (!a.prompt_cache_bytes.empty()) a.o.prompt_cache_bytes = parse_size(a.prompt_cache_bytes);
  a.o.prefill_buffer_cache_bytes = parse_size(a.prefill_buffer_cache, "--prefill-buffer-cache");
  if (a.o.prefill_step_size <= 0) throw UsageError("--prefill-step-size: must be positive");
  if (a.o.max_tokens < 1) throw UsageError("--max-tokens: must be at least 1");
  if (a.o.max_models < 1) throw UsageError("--max-models: must be at least 1 (got " + std::to_string(a.o.max_models) + ")");
  if (a.kv_bits != 0) {
    if (a.kv_bits < 2 || a.kv_bits > 8) throw UsageError("--kv-bits: expected 2 to 8 bits");
    a.o.kv_bits = a.kv_bits;
  }
  if (a.o.row_exact && a.o.kv_bits) throw UsageError("--spec-exact cannot be combined with --kv-bits (a quantized KV cache)");
  a.o.expert_memory_bytes = expert_memory_bytes(a.expert_memory);
  a.o.expert_prefetch = a.expert_prefetch;
  a.o.adapter_path = a.adapter_path;
  a.o.adapters = parse_adapter_specs(a.adapters);

  // SIGINT/SIGTERM stop the server. Our threads (HTTP workers, the generation thread) run with them
  // blocked, but threads a library started before main (OpenBLAS's pool) do not, and the kernel may
  // hand the signal to one of those: so a handler, on whichever thread takes it, wakes the waiter.
  if (::pipe2(stop_pipe, O_CLOEXEC) != 0) throw Error("mlxrt server: cannot create the stop pipe");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  server::Server srv(a.o);
  std::thread waiter([&] {
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);  // one thread of ours always takes them
    char what = 0;
    while (::read(stop_pipe[0], &what, 1) < 0 && errno == EINTR) {
    }
    if (what == 1) srv.stop();
  });
  std::exception_ptr failed;
  try {
    srv.serve();
  } catch (...) {
    failed = std::current_exception();  // distributed: a rank has gone
  }
  const char done = 0;  // the server stopped on its own: end the waiter
  [[maybe_unused]] auto n = ::write(stop_pipe[1], &done, 1);
  waiter.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

void register_server(CLI::App& app) {
  auto* cmd = app.add_subcommand("server", "Serve a model over HTTP with OpenAI's API (as mlx_lm.server)");
  cmd->alias("serve");
  auto a = std::make_shared<Args>();
  auto& o = a->o;
  cmd->add_option("--model", o.model,
                  "The path to the MLX model weights, tokenizer, and config (" + convert::default_model_help() + ")");
  cmd->add_option("--adapter-path", a->adapter_path, kAdapterPathHelp);
  cmd->add_option("--adapters", a->adapters,
                  "Adapters preloaded beside the model, as NAME=DIR (mlx_lm.lora adapter directories); a request "
                  "picks one by its 'adapters' field or a model name MODEL@NAME");
  add_fidelity_flag(cmd, o.fidelity);
  cmd->add_option("--max-models", o.max_models,
                  "Models held in memory at once; a request's 'model' (a model directory or a Hugging Face cache "
                  "id org/name) is loaded when not held, replacing the least recently used")
      ->capture_default_str();
  cmd->add_option("--host", o.host, "Host for the HTTP server")->capture_default_str();
  cmd->add_option("--port", o.port, "Port for the HTTP server")->capture_default_str();
  cmd->add_option("--allowed-origins", a->allowed_origins, "Allowed origins, comma-separated")->capture_default_str();
  cmd->add_option("--draft-model", a->draft_model, "A model to be used for speculative decoding");
  cmd->add_option("--num-draft-tokens", o.num_draft_tokens, "Number of tokens to draft")->capture_default_str();
  cmd->add_flag("--trust-remote-code", a->trust_remote_code, "Accepted for compatibility (no effect)");
  cmd->add_option("--log-level", a->log_level, "DEBUG, INFO, WARNING, ERROR or CRITICAL")->capture_default_str();
  cmd->add_option("--chat-template", o.chat_template, "A chat template (text) replacing the model's");
  cmd->add_flag("--use-default-chat-template", o.use_default_chat_template, "Accepted for compatibility");
  cmd->add_option("--temp", o.temp, "Default sampling temperature")->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "Default nucleus sampling top-p")->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "Default top-k sampling (0 disables)")->capture_default_str();
  cmd->add_option("--min-p", o.min_p, "Default min-p sampling (0 disables)")->capture_default_str();
  cmd->add_option("--max-tokens", o.max_tokens, "Default maximum number of tokens to generate")->capture_default_str();
  cmd->add_option("--chat-template-args", a->chat_template_args, "JSON object of chat template arguments")
      ->capture_default_str();
  cmd->add_option("--decode-concurrency", o.decode_concurrency, "Requests decoded in parallel when batching")
      ->capture_default_str();
  cmd->add_option("--prompt-concurrency", o.prompt_concurrency, "Prompts processed in parallel when batching")
      ->capture_default_str();
  cmd->add_option("--prefill-step-size", o.prefill_step_size, "Step size for prefill processing")
      ->capture_default_str();
  add_batch_order_option(cmd, o.prompts_first);
  add_first_tokens_option(cmd, o.first_tokens_early);
  add_join_prefill_option(cmd, o.join_prefill_beside, o.join_prefill_interleaved);
  cmd->add_option("--prefill-buffer-cache", a->prefill_buffer_cache,
                  "Keep MLX's buffer cache across a batch's prefill chunks while it holds at most this much (e.g. "
                  "512M; 0 clears it after every chunk, as mlx_lm.server does; ours)")
      ->capture_default_str();
  cmd->add_flag("--batch-invariant", o.batch_invariant,
                "Each batched request's tokens and logprobs equal the same request served alone (each row runs "
                "its own forward)");
  cmd->add_flag("--spec-exact", o.row_exact,
                "Compute every position as a one-token decoding step does: each request's tokens and logprobs "
                "(greedy) equal decoding it alone one token at a time, whatever the prompt cache reuses, the prefill "
                "chunks, the batch or the draft model (ours; CPU; implies --batch-invariant)");
  cmd->add_flag("--mtp", o.mtp,
                "Speculative decoding with the model's own multi-token-prediction head (Qwen3.5 / Qwen3-Next "
                "checkpoints that keep their mtp.* tensors); requests run alone, and the prompt cache keeps the head's state (ours)");
  cmd->add_flag("--warm-up", o.warm_up,
                "Before serving, run one prompt per 256-token bucket up to --prefill-step-size on the generation "
                "thread, alone and as batches of up to --prompt-concurrency rows, so a request pays no per-length "
                "setup (MLX's CUDA backend; ours)");
  cmd->add_option("--prompt-cache-size", o.prompt_cache_size, "Maximum number of distinct KV caches kept")
      ->capture_default_str();
  cmd->add_option("--prompt-cache-bytes", a->prompt_cache_bytes, "Maximum size of the kept KV caches (e.g. 8G)");
  cmd->add_option("--kv-bits", a->kv_bits, "Bits for KV cache quantization (e.g. 4 or 8; default: none)");
  cmd->add_option("--expert-memory", a->expert_memory, kExpertMemoryHelp);
  cmd->add_flag("--expert-prefetch", a->expert_prefetch, kExpertPrefetchHelp);
  cmd->add_option("--kv-group-size", o.kv_group_size, "Group size for KV cache quantization")->capture_default_str();
  cmd->add_option("--quantized-kv-start", o.quantized_kv_start, "Token position to start KV cache quantization")
      ->capture_default_str();
  add_distributed_flags(cmd, a->dist);
  cmd->add_option("--request-timeout", o.request_timeout_s, "Seconds a request may take, queueing included (0: none)")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", o.max_body_bytes, "Largest accepted request body")->capture_default_str();
  cmd->add_option("--http-threads", o.http_threads,
                  "Connections served at once (a thread each, added as connections arrive: idle or slow clients "
                  "cannot hold every one)")
      ->capture_default_str();
  cmd->add_option("--header-timeout", o.header_timeout_s,
                  "Seconds a connection has to send a request's whole header block, from accept (kept alive: from "
                  "the previous response); a client that trickles it is closed, not one whose headers have all arrived and wait "
                  "for a thread (0: none)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--body-timeout", o.body_timeout_s,
                  "Seconds a request's whole body may take to arrive after its headers; later: 408 and closed (0: none)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--heap-trim-interval", o.heap_trim_interval_s,
                  "Seconds between handing the C heap's freed pages back to the system, so that a long-running "
                  "server's resident size follows what it uses (glibc; 0: never)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--max-prompt-tokens", o.max_prompt_tokens,
                  "Longest prompt, in tokens, a request may bring (longer: a 400 before any prefill; default: any)")
      ->check(positive_number());
  cmd->add_option("--max-memory", o.max_memory_gb,
                  "GB a request may bring the weights plus the running requests' KV cache to; a request over it "
                  "waits, one that can never fit gets 503 (default: the device's memory, as mlxrt fit sees it)");
  cmd->add_flag("--no-chat-page", a->no_chat_page, "Do not serve the chat page at / (404 there, as mlx_lm.server)");
  cmd->callback([a] {
    a->o.model = convert::resolve_model_flag(a->o.model);
    run(*a);
  });
}

}  // namespace mlxrt::cli
