#pragma once
/** The server's counters for `GET /metrics`, in Prometheus' text exposition format (0.0.4):
 * requests by endpoint and status, prompt / generated / cached tokens, time to first token and
 * inter-token latency histograms, queue wait, the prompt cache's size, and the scheduler's gauges
 * (queue depth, running requests) read at render time. Thread-safe: the HTTP threads and the generation
 * thread record into one instance owned by the server. */
#include <array>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mlxrt/server/read_deadline.h"

namespace mlxrt::server {

/** A cumulative histogram with fixed upper bounds (seconds). */
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void observe(double value);
  /** The `_bucket`, `_sum` and `_count` lines of metric `name`. */
  std::string render(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<unsigned long long> counts_;  // per bound, not cumulative
  unsigned long long count_ = 0;
  double sum_ = 0.0;
};

/** The scheduler's state, read when /metrics is rendered. */
struct MetricsGauges {
  size_t queued_requests = 0;
  size_t running_requests = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  /** One answered HTTP request. `method` and `path` are reduced to the server's own methods and
   * routes ("other" for the rest), so that the label set stays bounded whatever clients send. */
  void request_answered(const std::string& method, const std::string& path, int status);
  /** A connection was closed for not delivering its request's headers or body in time
   * (--header-timeout, --body-timeout). */
  void read_timed_out(ReadPhase phase);
  /** A job reached the model: its prompt length, the tokens the prompt cache supplied, and how long
   * it waited in the queue. */
  void job_started(size_t prompt_tokens, size_t cached_tokens, double queue_seconds);
  /** The first token of a job, `seconds` after the request was queued. */
  void first_token(double seconds);
  /** A later token, `seconds` after the previous one. */
  void next_token(double seconds);
  void job_finished(size_t generated_tokens);
  /** A request joined a batch whose rows run other adapters (or the plain model): a mixed-adapter batch. */
  void mixed_adapter_join();
  /** Speculative decoding in a job (a draft model or the MTP head): tokens drafted, and those the
   * main model accepted. */
  void speculated(size_t drafted, size_t accepted);
  /** The prompt cache after a job (published by the generation thread, which owns the cache). */
  void prompt_cache_state(size_t bytes, size_t entries);
  /** A model was loaded (the start-up one included); `resident` models are held now. */
  void model_loaded(size_t resident);

  /** Memory admission's state: the weights, the KV bytes reserved by admitted requests, the budget,
   * and how many requests have had to wait for memory so far. */
  void memory_state(size_t weights_bytes, size_t admitted_kv_bytes, size_t budget_bytes, size_t waits);

  std::string render(const MetricsGauges& gauges) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, unsigned long long> requests_;  // (method, endpoint, status)
  unsigned long long prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0;
  unsigned long long jobs_started_ = 0, jobs_finished_ = 0, prompt_cache_hits_ = 0;
  size_t kv_cache_bytes_ = 0, prompt_cache_entries_ = 0;
  unsigned long long model_loads_ = 0;
  unsigned long long header_timeouts_ = 0, body_timeouts_ = 0;
  unsigned long long mixed_adapter_joins_ = 0;
  unsigned long long draft_tokens_ = 0, accepted_draft_tokens_ = 0;
  size_t models_resident_ = 0;
  size_t memory_weights_bytes_ = 0, admitted_kv_bytes_ = 0, memory_budget_bytes_ = 0, memory_waits_ = 0;
  Histogram ttft_, inter_token_, queue_wait_;
};

}  // namespace mlxrt::server
