#include "mlxrt/server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <mlx/memory.h>

#include "mlxrt/server/heap_trimmer.h"

#if MLXRT_GLIBC_HEAP
#include <malloc.h>
#endif

namespace mlxrt::server {

namespace mx = mlx::core;

namespace {

// The endpoints a label may name; anything else is counted as "other".
constexpr std::array<const char*, 12> kRoutes = {
    "/v1/chat/completions", "/chat/completions", "/v1/completions", "/v1/responses",
    "/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/v1/models",
    "/health", "/metrics", "/", "other"};

std::string route_label(const std::string& path) {
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  for (const char* r : kRoutes)
    if (path == r) return r;
  return "other";
}

/** A number as Prometheus reads it: integers without a fraction, others with enough digits. */
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void counter(std::string& out, const std::string& name, const char* help, unsigned long long value) {
  header(out, name, "counter", help);
  out += name + " " + std::to_string(value) + "\n";
}

void gauge(std::string& out, const std::string& name, const char* help, size_t value) {
  header(out, name, "gauge", help);
  out += name + " " + std::to_string(value) + "\n";
}

// Latency bounds in seconds: from a fast decode step to a long prefill.
std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 120};
}

}  // namespace

void Histogram::observe(double value) {
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  if (it != bounds_.end()) ++counts_[static_cast<size_t>(it - bounds_.begin())];
  ++count_;
  sum_ += value;
}

std::string Histogram::render(const std::string& name) const {
  std::string out;
  unsigned long long cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
  return out;
}

ServerMetrics::ServerMetrics() : ttft_(latency_bounds()), inter_token_(latency_bounds()), queue_wait_(latency_bounds()) {}

void ServerMetrics::request_answered(const std::string& method, const std::string& path, int status) {
  static constexpr std::array<const char*, 5> kMethods = {"GET", "POST", "OPTIONS", "HEAD", "PUT"};
  std::string method_label = "other";
  for (const char* m : kMethods)
    if (method == m) method_label = m;
  std::lock_guard lock(mutex_);
  ++requests_[{method_label, route_label(path), status}];
}

void ServerMetrics::read_timed_out(ReadPhase phase) {
  std::lock_guard lock(mutex_);
  ++(phase == ReadPhase::body ? body_timeouts_ : header_timeouts_);
}

void ServerMetrics::job_started(size_t prompt_tokens, size_t cached_tokens, double queue_seconds) {
  std::lock_guard lock(mutex_);
  ++jobs_started_;
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached_tokens;
  if (cached_tokens > 0) ++prompt_cache_hits_;
  queue_wait_.observe(queue_seconds);
}

void ServerMetrics::mixed_adapter_join() {
  std::lock_guard lock(mutex_);
  ++mixed_adapter_joins_;
}

void ServerMetrics::first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void ServerMetrics::next_token(double seconds) {
  std::lock_guard lock(mutex_);
  inter_token_.observe(seconds);
}

void ServerMetrics::job_finished(size_t generated_tokens) {
  std::lock_guard lock(mutex_);
  ++jobs_finished_;
  generated_tokens_ += generated_tokens;
}

void ServerMetrics::speculated(size_t drafted, size_t accepted) {
  std::lock_guard lock(mutex_);
  draft_tokens_ += drafted;
  accepted_draft_tokens_ += accepted;
}

void ServerMetrics::prompt_cache_state(size_t bytes, size_t entries) {
  std::lock_guard lock(mutex_);
  kv_cache_bytes_ = bytes;
  prompt_cache_entries_ = entries;
}

void ServerMetrics::model_loaded(size_t resident) {
  std::lock_guard lock(mutex_);
  ++model_loads_;
  models_resident_ = resident;
}

void ServerMetrics::memory_state(size_t weights_bytes, size_t admitted_kv_bytes, size_t budget_bytes, size_t waits) {
  std::lock_guard lock(mutex_);
  memory_waits_ = waits;
  memory_weights_bytes_ = weights_bytes;
  admitted_kv_bytes_ = admitted_kv_bytes;
  memory_budget_bytes_ = budget_bytes;
}

std::string ServerMetrics::render(const MetricsGauges& g) const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "mlxrt_http_requests_total", "counter", "HTTP requests answered, by method, endpoint and status code.");
  for (const auto& [key, n] : requests_) {
    const auto& [method, endpoint, status] = key;
    out += "mlxrt_http_requests_total{method=\"" + method + "\",endpoint=\"" + endpoint + "\",status=\"" +
           std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  }
  header(out, "mlxrt_http_read_timeouts_total", "counter",
         "Connections closed for not sending their request's headers (--header-timeout) or body (--body-timeout) in "
         "time, by phase.");
  out += "mlxrt_http_read_timeouts_total{phase=\"headers\"} " + std::to_string(header_timeouts_) + "\n";
  out += "mlxrt_http_read_timeouts_total{phase=\"body\"} " + std::to_string(body_timeouts_) + "\n";
  counter(out, "mlxrt_requests_started_total", "Requests that reached the model.", jobs_started_);
  counter(out, "mlxrt_requests_finished_total", "Requests whose generation ended (finished, stopped or abandoned).",
          jobs_finished_);
  counter(out, "mlxrt_prompt_tokens_total", "Prompt tokens of the requests that reached the model.", prompt_tokens_);
  counter(out, "mlxrt_prompt_cached_tokens_total", "Prompt tokens supplied by the prompt cache.", cached_tokens_);
  counter(out, "mlxrt_prompt_cache_hits_total", "Requests that reused a prompt-cache entry.", prompt_cache_hits_);
  counter(out, "mlxrt_generation_tokens_total", "Tokens generated.", generated_tokens_);
  counter(out, "mlxrt_model_loads_total", "Models loaded, the start-up model included.", model_loads_);
  counter(out, "mlxrt_spec_decode_draft_tokens_total", "Tokens drafted by speculative decoding (a draft model or the MTP head).",
          draft_tokens_);
  counter(out, "mlxrt_spec_decode_accepted_tokens_total", "Drafted tokens the main model accepted.",
          accepted_draft_tokens_);
  counter(out, "mlxrt_mixed_adapter_joins_total",
          "Requests that joined a batch running other adapters (--adapters: rows of different adapters batch together).",
          mixed_adapter_joins_);
  header(out, "mlxrt_time_to_first_token_seconds", "histogram", "From the request being queued to its first token.");
  out += ttft_.render("mlxrt_time_to_first_token_seconds");
  header(out, "mlxrt_inter_token_latency_seconds", "histogram", "Between consecutive tokens of one request.");
  out += inter_token_.render("mlxrt_inter_token_latency_seconds");
  header(out, "mlxrt_queue_wait_seconds", "histogram", "From the request being queued to reaching the model.");
  out += queue_wait_.render("mlxrt_queue_wait_seconds");
  gauge(out, "mlxrt_queue_depth", "Requests waiting for the model.", g.queued_requests);
  gauge(out, "mlxrt_batch_size", "Requests on the model now.", g.running_requests);
  gauge(out, "mlxrt_kv_cache_bytes", "Bytes of KV cache held by the prompt cache.", kv_cache_bytes_);
  gauge(out, "mlxrt_prompt_cache_entries", "Entries in the prompt cache.", prompt_cache_entries_);
  gauge(out, "mlxrt_models_resident", "Models held in memory (--max-models at most).", models_resident_);
  counter(out, "mlxrt_memory_waits_total", "Requests that waited for memory before reaching the model.",
          memory_waits_);
  gauge(out, "mlxrt_memory_budget_bytes", "Memory admission: the budget (--max-memory).", memory_budget_bytes_);
  gauge(out, "mlxrt_memory_weights_bytes", "Memory admission: the model's weights.", memory_weights_bytes_);
  gauge(out, "mlxrt_admitted_kv_bytes", "Memory admission: KV cache bytes reserved by the requests on the model.",
        admitted_kv_bytes_);
  // MLX's allocator, read at scrape time: what arrays hold now, and the freed buffers it keeps for
  // reuse (what a growing resident size with a flat active size is).
  gauge(out, "mlxrt_mlx_active_memory_bytes", "Bytes held by live MLX arrays.", mx::get_active_memory());
  gauge(out, "mlxrt_mlx_cache_memory_bytes", "Bytes of freed buffers MLX's allocator keeps for reuse.",
        mx::get_cache_memory());
  gauge(out, "mlxrt_mlx_peak_memory_bytes", "The most bytes MLX arrays have held at once.", mx::get_peak_memory());
#if MLXRT_GLIBC_HEAP
  // The C heap beside MLX's buffers, summed over malloc's arenas: a resident size that grows while
  // the bytes in use stay flat is memory freed but kept by the arenas, not a leak.
  const struct mallinfo2 heap = mallinfo2();
  header(out, "mlxrt_process_heap_bytes", "gauge",
         "The C heap (malloc's arenas and mapped blocks): bytes in use, and bytes freed but kept by the arenas.");
  out += "mlxrt_process_heap_bytes{state=\"in_use\"} " + std::to_string(heap.uordblks + heap.hblkhd) + "\n";
  out += "mlxrt_process_heap_bytes{state=\"free\"} " + std::to_string(heap.fordblks) + "\n";
#endif
  return out;
}

}  // namespace mlxrt::server
