#pragma once
/** The generation side of the server: runs one job on the model (mlx_lm.server's _serve_single
 * with stream_generate inlined), with the prompt cache, sampler, logits processors, stop
 * sequences and streaming detokenizer, checking the job's stop conditions before every step.
 * Used only from the generation thread. */
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mlxrt/generate/batch_generator.h"
#include "mlxrt/structured/grammar_constraint.h"
#include "mlxrt/generate/random_state.h"
#include "mlxrt/server/job.h"
#include "mlxrt/server/lockstep.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/metrics.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/prompt_cache.h"
#include "mlxrt/server/stop_sequences.h"

namespace mlxrt::server {

class Generator {
 public:
  /** `session`: the model jobs without a model of their own run on (the start-up model).
   * `lockstep`: the ranks of a distributed server (null: one process); the PRNG then starts from
   * the seed every rank agrees on, and every decision that depends on time or clients is the
   * leader's. */
  Generator(std::shared_ptr<ModelSession> session, const ServerOptions& options, Logger& log, ServerMetrics& metrics,
            std::shared_ptr<Lockstep> lockstep = nullptr);

  /** Serves `job`: StartedEvent, ProgressEvents, TokenEvents (the last with a finish reason
   * unless stopped early), DoneEvent. HttpError(400) for parameters the sampler refuses. */
  void run(Job& job);

  const PromptCache& prompt_cache() const { return cache_; }

  // --- continuous batching: mlx_lm.server's batch path (its _generate loop drives these) ---

  /** mlx_lm.server's _is_batchable: the model batches (every cache merges, no draft model), the
   * request has no seed and the server does not quantize its KV cache. */
  bool batchable(const Job& job) const;
  /** tool_choice that requires a call: the constraint that masks the reply to one call (warns and
   * leaves the reply free for a tool-call format it cannot enforce). HttpError(400) for bad tools. */
  void force_tool_call(const CompletionRequest& r, int vocab_size, generate::GenerateOptions& go);
  /** The constrained-decoding engine of the current model, made on first use. */
  structured::GrammarEngine& grammar_engine(int vocab_size);
  /** How a request joins a decoding batch here: "between", "beside" or "interleaved"
   * (--join-prefill; between for ranks in lockstep or the mlx-lm batch order). */
  std::string join_prefill_mode() const;
  /** Makes the BatchGenerator for `job`'s model (--decode-concurrency, --prompt-concurrency,
   * --prefill-step-size). */
  void batch_open(const Job& job);
  /** `job` runs on the model of the open batch (only such jobs join it). */
  bool batch_joinable(const Job& job) const;
  /** Drops the BatchGenerator (no job may be in it). */
  void batch_close();
  /** Adds a job to the batch: its sampler, processors, stop sequences and prompt-cache hit; an
   * ErrorEvent for parameters the sampler refuses. */
  void batch_insert(const std::shared_ptr<Job>& job);
  /** Jobs in the batch. */
  size_t batch_jobs() const { return batch_.size(); }
  /** BatchGenerator.next() calls for up to half a second (mlx_lm.server's TimeBudget), each
   * job's progress and tokens pushed as they come; finished jobs go to the prompt cache. The
   * budget ends early, after a step, once `arrived()` says a request is waiting to join. */
  void batch_serve(const std::function<bool()>& arrived);
  /** Ends every job in the batch with `status` and drops the generator. */
  void batch_fail(int status, const std::string& message);

 private:
  struct BatchJob {
    std::shared_ptr<Job> job;
    tokenizer::StreamingDetokenizer detok;
    size_t generated = 0;
    Job::Clock::time_point last_event;
    std::string adapter;  // the --adapters name it runs ("" for the base model)
    Job::Clock::time_point inserted;  // when it went into the batch generator (its queue wait ends)
  };
  std::shared_ptr<const StopSequences> stop_sequences(const std::vector<std::string>& words);
  /** Makes `session` (a job's model; null: keep the current one) the model of what follows,
   * dropping what was derived from the previous one (stop sequences, grammar token table). */
  void use(const std::shared_ptr<ModelSession>& session);
  const ModelSession& session_of(const Job& job) const { return job.session() ? *job.session() : *session_; }
  /** The prompt cache's key: the model, then the adapter (mlx-lm keys by model, adapter, draft). */
  std::string cache_key(const std::string& adapter) const { return session_->key + '\n' + adapter; }

  /** The batch's jobs that stop now (client gone, cancelled, deadline): the leader's list on
   * every rank of a distributed server. */
  std::vector<int> stopping_jobs() const;

  std::shared_ptr<ModelSession> session_;
  const ServerOptions& options_;
  Logger& log_;
  ServerMetrics& metrics_;
  PromptCache cache_;
  std::shared_ptr<generate::RandomState> rng_;
  std::map<std::vector<std::string>, std::shared_ptr<const StopSequences>> stop_cache_;
  std::vector<int32_t> newline_tokens_;
  std::optional<std::string> unbatchable_;  // why the model cannot batch (nullopt: it can)
  std::unique_ptr<generate::BatchGenerator> batcher_;
  /** The batch's decoding steps' host and device split, summed while DEBUG logs are on: each
   * budget's log line gives its share per step (build, dispatch, waiting for the device). */
  generate::StepTiming step_timing_;
  /** Batched rows with samplers of their own are drawn on up to four cores: one MLX CPU stream
   * (and thread) each besides the default (BatchGeneratorOptions::sample_streams); none off the CPU. */
  std::vector<mx::Stream> sample_streams_for_this_thread();
  std::vector<mx::Stream> sample_streams_;
  std::thread::id sample_streams_thread_;  // the thread that made sample_streams_
  /** The --adapters name the open batch runs ("" for the base model); unused when the session's
   * mixed-adapter model runs every adapter in one batch. */
  std::string batch_adapter_;
  std::map<int, BatchJob> batch_;
  std::unique_ptr<structured::GrammarEngine> grammar_;  // structured output, made on first use
  std::shared_ptr<Lockstep> lockstep_;
};

}  // namespace mlxrt::server
