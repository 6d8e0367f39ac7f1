#include "mlxrt/generate/prefill_warm_up.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <mlx/memory.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/generate/batch_generator.h"
#include "mlxrt/generate/generate_step.h"
#include "mlxrt/model/nn/attention.h"

namespace mlxrt::generate {

namespace {
constexpr int kBucket = 256;  // the KV cache's step, which padded_attention_length rounds to

/** `rows` prompts of `length` tokens prefilled together through the batched path, one token each;
 * with `hit`, each row continues a copy of that cache (a prompt-cache hit of `hit_tokens`). */
void run_batch(model::CausalLM& model, int prefill_step_size, int rows, int length,
               const model::CacheList* hit = nullptr, int hit_tokens = 0) {
  BatchGeneratorOptions options;
  options.max_tokens = 1;
  options.prefill_batch_size = rows;
  options.completion_batch_size = rows;
  options.prefill_step_size = prefill_step_size;
  BatchGenerator batch(model, options);
  std::vector<BatchRequest> requests(static_cast<size_t>(rows));
  for (auto& r : requests) {
    r.prompt.assign(static_cast<size_t>(length), 0);
    if (!hit) continue;
    for (const auto& layer : *hit) r.cache.push_back(layer->clone());
    r.all_tokens.assign(static_cast<size_t>(hit_tokens), 0);
  }
  batch.insert(std::move(requests));
  while (batch.size() > 0)
    for (auto& response : batch.next().second) mx::eval(response.logprobs);
}

/** A fresh cache holding `tokens` prompt tokens (their ids do not matter). */
model::CacheList prefilled_cache(model::CausalLM& model, int tokens) {
  auto cache = model.make_cache();
  model(mx::zeros({1, tokens}, mx::int32), &cache);
  mx::eval(cache::state_arrays(cache));
  return cache;
}
}  // namespace

std::vector<int> decode_warm_up_rows(int decode_rows) {
  std::vector<int> counts;
  for (int rows = 1; rows <= std::min(decode_rows, 8); ++rows) counts.push_back(rows);
  for (int rows = 16; rows < decode_rows + 8; rows += 8) counts.push_back(rows);
  return counts;
}

WarmUpReport warm_up_prefill_shapes(model::CausalLM& model, int prefill_step_size, std::optional<int> max_kv_size,
                                    std::optional<int> kv_bits) {
  WarmUpReport report;
  if (!model::nn::prefill_attention_padded()) {
    report.skipped = "the prefill attention is not padded here (it is on MLX's CUDA backend with cuDNN's attention)";
    return report;
  }
  if (max_kv_size || kv_bits) {
    report.skipped = std::string("the ") + (max_kv_size ? "rotating (--max-kv-size)" : "quantized (--kv-bits)") +
                     " KV cache is not padded";
    return report;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int last = (prefill_step_size + kBucket - 1) / kBucket * kBucket + kBucket;
  for (int length = kBucket; length <= last; length += kBucket) {
    // The token ids do not matter: the shapes do. Generation keeps the last prompt token for its
    // first step, as every request does, so both graphs of this bucket are built.
    GenerateOptions options;
    options.max_tokens = 1;
    options.prefill_step_size = prefill_step_size;
    TokenGenerator generator(model, std::vector<int32_t>(length, 0), options);
    if (auto token = generator.next()) mx::eval(token->logprobs);
    ++report.prompts;
    report.longest = length;
  }
  mx::clear_cache();  // the warm-up's buffers are not the requests'
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

WarmUpReport warm_up_server_prefill_shapes(model::CausalLM& model, int prefill_step_size, int batch_rows,
                                           std::optional<int> kv_bits, int decode_rows) {
  WarmUpReport report = warm_up_prefill_shapes(model, prefill_step_size, std::nullopt, kv_bits);
  if (!report.skipped.empty()) return report;
  if (auto why = batching_unsupported_reason(model)) {
    report.note = "the batched path was not warmed: " + *why;
    return report;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int last = (prefill_step_size + kBucket - 1) / kBucket * kBucket + kBucket;
  for (int length = kBucket; length <= last; length += kBucket) {
    run_batch(model, prefill_step_size, 1, length);
    report.prompts += 1;
  }
  // The row counts a prompt batch's attention runs at: every count up to --prompt-concurrency, or,
  // where rows are padded (model/nn/attention.h padded_row_count), the powers of two that cover it.
  std::vector<int> row_counts;
  const bool rows_padded = model::nn::masked_prefill_rows_padded();
  for (int rows = 1; rows <= batch_rows; ++rows)
    if (!rows_padded || rows == model::nn::padded_row_count(rows)) row_counts.push_back(rows);
  if (rows_padded && row_counts.back() < batch_rows) row_counts.push_back(model::nn::padded_row_count(batch_rows));
  for (int rows : row_counts) {
    if (rows == 1) continue;  // the single rows ran above, one per bucket
    run_batch(model, prefill_step_size, rows, kBucket);
    report.prompts += rows;
  }
  // Decoding steps of the row counts the prompt batches above did not run (their attention pads
  // rows to powers of two, so a batch of 3 was not among them): L3's kernels on CUDA are compiled
  // per row count (kernels/cuda/affine_qmv.h: 1-7 rows; then one per 8-row chunk count), about a
  // second each at a request's first step otherwise. A batch of 2-token prompts starts with a
  // decoding step of its rows.
  for (int rows : decode_warm_up_rows(decode_rows)) {
    if (std::find(row_counts.begin(), row_counts.end(), rows) != row_counts.end()) continue;
    run_batch(model, prefill_step_size, rows, 2);
    report.prompts += rows;
  }
  if (model::nn::masked_prefill_contiguous()) {
    // Prompt-cache hits: a chunk at an offset off the 256 step, its queries padded to
    // padded_query_count and its keys to the next multiple of 256 (Tp 256 after a hit of 1 token,
    // 512 after 257), so its shape depends only on the rows, the query count and Tp. The new tokens
    // (plus the last, kept for the first step) make each query count 16 .. 256 once.
    for (int hit_tokens : {1, kBucket + 1}) {
      const auto hit = prefilled_cache(model, hit_tokens);
      for (int rows : row_counts)
        for (int queries : {16, 32, 64, 128, 255}) {
          run_batch(model, prefill_step_size, rows, queries + 1, &hit, hit_tokens);
          report.prompts += rows;
        }
    }
  }
  mx::clear_cache();
  report.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

std::string describe(const WarmUpReport& report) {
  if (!report.skipped.empty()) return "warm-up: skipped: " + report.skipped;
  char line[160];
  std::snprintf(line, sizeof line, "warm-up: %d prompts of 256..%d tokens in %.2f s", report.prompts, report.longest,
                report.seconds);
  return report.note.empty() ? std::string(line) : std::string(line) + " (" + report.note + ")";
}

}  // namespace mlxrt::generate
