#pragma once
/** Warming the prefill attention's shapes before the first request (issue 14).
 *
 * On MLX's CUDA backend a prompt length the process has not run before costs 40-60 ms for each
 * cuDNN attention graph MLX builds (one per query/key shape, kept per thread), against 16-72 ms
 * for a whole warm 512-token prefill on an H200. With the prefill attention padded to the KV
 * buffer's 256-position step (model/nn/attention.h, prefill_attention_padded), those shapes depend
 * only on the bucket, so running one prompt per bucket once builds every graph a later prompt of
 * up to the prefill step (plus one bucket) will use: its prefill chunk, and the one-query graph of
 * its last prompt token, which MLX keys on the buffer's capacity. The graphs live in a thread-local
 * cache, so this must run on the thread that will generate. */
#include <optional>
#include <string>
#include <vector>

#include "mlxrt/model/causal_lm.h"

namespace mlxrt::generate {

struct WarmUpReport {
  int prompts = 0;       // prompts run (one per 256-position bucket, and the batched ones)
  int longest = 0;       // the longest prompt, in tokens
  double seconds = 0.0;  // wall time of the whole warm-up
  std::string skipped;   // why nothing was run ("" when it ran)
  std::string note;      // what was left out of a warm-up that ran ("" when nothing)
};

/** Runs one prompt of each length 256, 512, ... up to `prefill_step_size` rounded up to 256, plus
 * 256 (the second chunk and the last token of a prompt one step long), through plain generation of
 * one token, on the calling thread, each in a fresh cache. Does nothing (and says why) where the
 * attention is not padded (CPU, Metal, MLX_CUDA_USE_CUDNN_SDPA=0, MLXRT_PAD_PREFILL_ATTENTION=0) or
 * the cache is not the plain KV cache that padding reads (`max_kv_size`: rotating; `kv_bits`:
 * quantized). */
WarmUpReport warm_up_prefill_shapes(model::CausalLM& model, int prefill_step_size,
                                    std::optional<int> max_kv_size = std::nullopt,
                                    std::optional<int> kv_bits = std::nullopt);

/** The server's warm-up: the above, then the batched path's shapes (BatchGenerator, which the
 * server's unseeded requests take). Its prefill attention takes a mask array, whose shape MLX's
 * graph is keyed on too, rows included: one prompt per bucket as a batch of one, and batches of 2 ..
 * `batch_rows` prompts (the server's --prompt-concurrency) of the first bucket, where concurrent
 * short prompts land; with model::nn::masked_prefill_contiguous(), also batches of 1 ..
 * `batch_rows` rows continuing a prompt-cache hit (chunks of 16 .. 256 queries at 256 and 512
 * keys); and batches of 2-token prompts whose first steps decode the row counts those did not
 * run: 1 to 8 rows, then every multiple of 8 up to `decode_rows` (the server's
 * --decode-concurrency) rounded up. Models that cannot batch skip that part (and say so). */
WarmUpReport warm_up_server_prefill_shapes(model::CausalLM& model, int prefill_step_size, int batch_rows,
                                           std::optional<int> kv_bits = std::nullopt, int decode_rows = 0);

/** The decoding row counts the server's warm-up runs, those whose steps compile different L3
 * kernels on CUDA (kernels/cuda/affine_qmv.h): 1 to 8 rows, then each multiple of 8 up to
 * `decode_rows` rounded up to one (one per count of 8-row chunks). */
std::vector<int> decode_warm_up_rows(int decode_rows);

/** The report as one line for a log or stderr ("warm-up: ..."). */
std::string describe(const WarmUpReport& report);

}  // namespace mlxrt::generate
