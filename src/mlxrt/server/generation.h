#pragma once
/** The generation side of the server: runs one job on the model (mlx_lm.server's _serve_single
 * with stream_generate inlined), with the prompt cache, sampler, logits processors, stop
 * sequences and streaming detokenizer, checking the job's stop conditions before every step.
 * Used only from the generation thread. */
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mlxrt/generate/grammar_constraint.h"
#include "mlxrt/generate/random_state.h"
#include "mlxrt/server/job.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/metrics.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/prompt_cache.h"
#include "mlxrt/server/stop_sequences.h"

namespace mlxrt::server {

class Generator {
 public:
  Generator(ModelSession& session, const ServerOptions& options, Logger& log, ServerMetrics& metrics);

  /** Serves `job`: StartedEvent, ProgressEvents, TokenEvents (the last with a finish reason
   * unless stopped early), DoneEvent. HttpError(400) for parameters the sampler refuses. */
  void run(Job& job);

  const PromptCache& prompt_cache() const { return cache_; }

 private:
  std::shared_ptr<const StopSequences> stop_sequences(const std::vector<std::string>& words);

  ModelSession& session_;
  const ServerOptions& options_;
  Logger& log_;
  ServerMetrics& metrics_;
  PromptCache cache_;
  std::shared_ptr<generate::RandomState> rng_;
  std::map<std::vector<std::string>, std::shared_ptr<const StopSequences>> stop_cache_;
  std::vector<int32_t> newline_tokens_;
  std::unique_ptr<generate::GrammarEngine> grammar_;  // structured output, made on first use
};

}  // namespace mlxrt::server
