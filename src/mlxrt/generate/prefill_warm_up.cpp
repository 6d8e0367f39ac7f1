#include "mlxrt/generate/prefill_warm_up.h"

#include <chrono>
#include <cstdio>
#include <vector>

#include <mlx/memory.h>
#include <mlx/transforms.h>

#include "mlxrt/generate/batch_generator.h"
#include "mlxrt/generate/generate_step.h"
#include "mlxrt/model/nn/attention.h"

namespace mlxrt::generate {

namespace {
constexpr int kBucket = 256;  // the KV cache's step, which padded_attention_length rounds to

/** `rows` prompts of `length` tokens prefilled together through the batched path, one token each. */
void run_batch(model::CausalLM& model, int prefill_step_size, int rows, int length) {
  BatchGeneratorOptions options;
  options.max_tokens = 1;
  options.prefill_batch_size = rows;
  options.completion_batch_size = rows;
  options.prefill_step_size = prefill_step_size;
  BatchGenerator batch(model, options);
  std::vector<BatchRequest> requests(static_cast<size_t>(rows));
  for (auto& r : requests) r.prompt.assign(static_cast<size_t>(length), 0);
  batch.insert(std::move(requests));
  while (batch.size() > 0)
    for (auto& response : batch.next().second) mx::eval(response.logprobs);
}
}  // namespace

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
                                           std::optional<int> kv_bits) {
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
  for (int rows = 2; rows <= batch_rows; ++rows) {
    run_batch(model, prefill_step_size, rows, kBucket);
    report.prompts += rows;
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
