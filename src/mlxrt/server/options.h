#pragma once
/** The server's settings: mlx_lm.server's flags (same names and defaults) plus the limits that
 * keep one client from exhausting the server. */
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/dist/peer_watch.h"
#include "mlxrt/model/profile.h"

namespace mlxrt::model {
struct Parallel;
}

namespace mlxrt::server {

enum class LogLevel { debug, info, warning, error, critical };

struct ServerOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> allowed_origins = {"*"};
  LogLevel log_level = LogLevel::info;
  std::string chat_template;  // a template string that replaces the model's (empty: the model's)
  bool use_default_chat_template = false;
  nlohmann::ordered_json chat_template_args = nlohmann::ordered_json::object();
  std::string draft_model;  // --draft-model: speculative decoding with this model (empty: none)
  int num_draft_tokens = 3;

  // Request defaults.
  double temp = 0.0;
  double top_p = 1.0;
  int top_k = 0;
  double min_p = 0.0;
  int max_tokens = 512;

  // Engine.
  int decode_concurrency = 32;
  int prompt_concurrency = 8;
  int prefill_step_size = 2048;
  bool batch_invariant = false;  // --batch-invariant: each batched request equals its solo run
  /** --batch-order prompts-first (the default; ours) or mlx-lm: the order of a batch step
   * (generate::BatchGeneratorOptions::prompts_first). */
  bool prompts_first = true;
  /** MLX's buffer cache is kept across a batch's prefill chunks up to this many bytes
   * (generate::BatchGeneratorOptions::prefill_buffer_cache_bytes; 0: cleared after each chunk as
   * mlx_lm.server does). --prefill-buffer-cache GB. */
  size_t prefill_buffer_cache_bytes = 1'000'000'000;  // --prefill-buffer-cache's default, 1G
  /** --first-tokens early (the default; ours) or pipelined: a joining row's first token handed out
   * before the batch's next step is encoded (generate::BatchGeneratorOptions::first_tokens_early). */
  bool first_tokens_early = true;
  /** --join-prefill beside or between: a prompt that joins a decoding batch is prefilled beside the
   * batch's steps on a second stream (ours), or between them in the batch's order
   * (generate::BatchGeneratorOptions::join_prefill_beside). Measured on an H100 and on the CPU,
   * beside gave a later first token than between (bench/RESULTS.md, twenty-eighth session).
   * Distributed servers keep between. True for interleaved, the default, which is a way of
   * joining beside. */
  bool join_prefill_beside = true;
  /** --join-prefill interleaved (the default; with join_prefill_beside; ours): the joining prompt
   * on the batch's own stream, between pieces of its steps
   * (generate::BatchGeneratorOptions::join_prefill_interleaved). Under a steady load it took the
   * p99 of the first token from 5-13 times the solo one to under 3 times on the CPU, for 13-18% of
   * the throughput (bench/RESULTS.md, thirtieth session), and on an H100 about halved it at 32
   * clients for 0-7% (thirty-second session). */
  bool join_prefill_interleaved = true;
  /** --spec-exact: the model computes every position as a one-token step (LoadOptions::row_exact);
   * batches then run batch-invariant, so every request gets one-token decoding's bytes. */
  bool row_exact = false;
  /** --mtp: the start-up model drafts with its own multi-token-prediction head (ours;
   * generate::MtpTokenGenerator): requests run alone; the prompt cache keeps the head's state with each entry. */
  bool mtp = false;
  /** --warm-up: before the first request, the generation thread runs one prompt per 256-token
   * bucket, alone and through the batched path (generate/prefill_warm_up.h), so a request pays no
   * per-length setup on MLX's CUDA backend (ours). */
  bool warm_up = false;
  int prompt_cache_size = 10;
  std::optional<size_t> prompt_cache_bytes;
  std::optional<int> kv_bits;  // quantize the KV cache past quantized_kv_start positions
  int kv_group_size = 64;
  int quantized_kv_start = 5000;
  std::optional<uint64_t> expert_memory_bytes;  // --expert-memory: streamed experts (ours)
  bool expert_prefetch = false;                  // --expert-prefetch: read the next MoE layer's guesses ahead
  std::string adapter_path;                     // --adapter-path: an mlx_lm.lora adapter on the model
  /** --adapters name=DIR ...: adapters preloaded beside the model, chosen per request (ours). */
  std::vector<std::pair<std::string, std::string>> adapters;
  /** --max-models: models held at once, loaded as requests name them (ours; mlx_lm.server holds 1). */
  int max_models = 1;
  /** --fidelity: every model (and draft) loaded at this tier (ours; l1 computes mlx-lm's bytes). */
  model::FidelityTier fidelity = model::FidelityTier::l1;
  /** Under mlx.launch / `mlxrt launch`: how this rank holds its part of the model (tensor or
   * pipeline parallel, as mlx_lm.server's sharded_load); null for one process. (A pointer, so that
   * this header needs no MLX: the request parser's fuzzer builds without it.) */
  std::shared_ptr<const model::Parallel> parallel;
  /** Under the ring backend: its connections to the other ranks (dist::Group::ring_peers), where
   * an idle follower sleeps until rank 0's next exchange (Lockstep::await_leader). */
  std::vector<dist::OpenSocket> ring_peers;

  // Limits (ours; mlx_lm.server has none).
  size_t max_body_bytes = 16u << 20;
  size_t max_header_bytes = 16u << 10;
  size_t max_header_count = 100;
  double request_timeout_s = 600.0;  // whole request, queueing included; 0: none
  int http_threads = 1024;           // connections served at once (threads are added as they arrive)
  double header_timeout_s = 10.0;    // a request's header block, from accept or the previous response; 0: none
  double body_timeout_s = 60.0;      // a request's body, from the end of its headers; 0: none
  double heap_trim_interval_s = 10.0;  // freed C-heap pages back to the system this often (HeapTrimmer); 0: never
  int max_queued_requests = 1024;    // beyond this, 503
  std::optional<int> max_prompt_tokens;  // --max-prompt-tokens: longer prompts are a 400 (unset: any length)
  std::optional<double> max_memory_gb;  // --max-memory: admission budget (unset: the device's memory)

  // The chat page at GET / (ours; mlx_lm.server answers 404 there). --no-chat-page turns it off.
  bool chat_page = true;
};

}  // namespace mlxrt::server
