// Port of create_attention_mask, scaled_dot_product_attention and
// quantized_scaled_dot_product_attention (mlx_lm/models/base.py, mlx-lm 0.32.2).
#include "mlxrt/model/nn/attention.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <mlx/backend/cuda/cuda.h>
#include <mlx/device.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/types/limits.h>

#include "mlxrt/cache/batch_cache.h"
#include "mlxrt/cache/batch_kv_cache.h"
#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::nn {

AttentionMask create_attention_mask(int n, const cache::Cache* cache, std::optional<int> window_size) {
  if (cache) return cache->make_mask(n, window_size);
  if (n == 1) return {};
  if (window_size && n > *window_size) return AttentionMask::of(cache::create_causal_mask(n, 0, window_size));
  return AttentionMask::causal();
}

namespace {

/** RoPE with one offset per batch row (mx.fast.rope with an offset array): rows at the same offset
 * are rotated together; RoPE is elementwise per position, so this is the same arithmetic. */
mx::array rope_rows(const Rope& rope, const mx::array& x, const std::vector<int>& offsets) {
  if (std::all_of(offsets.begin(), offsets.end(), [&](int o) { return o == offsets.front(); }))
    return rope(x, offsets.front());
  std::vector<mx::array> rows;
  for (int b = 0; b < static_cast<int>(offsets.size()); ++b) {
    mx::Shape lo(x.ndim(), 0), hi = x.shape();
    lo[0] = b;
    hi[0] = b + 1;
    rows.push_back(rope(mx::slice(x, lo, hi), offsets[b]));
  }
  return mx::concatenate(rows, 0);
}

}  // namespace

cache::CachedKV rope_and_update_cache(const Rope& rope, mx::array& queries, const mx::array& keys,
                                      const mx::array& values, cache::Cache* cache) {
  if (!cache) {
    queries = rope(queries, 0);
    return cache::PlainKV{rope(keys, 0), values};
  }
  if (const auto* batch = dynamic_cast<const cache::BatchCache*>(cache)) {
    // mlx-lm passes the batched cache's offset array to RoPE: each row rotated at its own offset,
    // in one op (a row at a time is the same arithmetic, but two ops per row and layer: on a GPU
    // that was most of a batched decode step).
    if (rope.takes_offset_array()) {
      queries = rope(queries, batch->offset_array());
      return cache->update_and_fetch(rope(keys, batch->offset_array()), values);
    }
    queries = rope_rows(rope, queries, batch->offsets());
    return cache->update_and_fetch(rope_rows(rope, keys, batch->offsets()), values);
  }
  queries = rope(queries, cache->offset());
  return cache->update_and_fetch(rope(keys, cache->offset()), values);
}

mx::array dtype_lowest(mx::Dtype dtype) {
  float v = std::numeric_limits<float>::lowest();
  if (dtype == mx::float16) v = static_cast<float>(mx::numeric_limits<mx::float16_t>::lowest());
  if (dtype == mx::bfloat16) v = static_cast<float>(mx::numeric_limits<mx::bfloat16_t>::lowest());
  return mx::array(v, dtype);
}

int padded_attention_length(int keys, int capacity) {
  constexpr int kStep = 256;  // KVCache::kStep: the buffer grows by it, so capacity is a multiple
  return std::max(keys, std::min((keys + kStep - 1) / kStep * kStep, capacity));
}

int padded_query_count(int queries) {
  if (queries > 256) return (queries + 255) / 256 * 256;
  int n = 16;
  while (n < queries) n *= 2;
  return n;
}

int padded_row_count(int rows) {
  int n = 1;
  while (n < rows) n *= 2;
  return n;
}

namespace {

// Prefill attention at a new length, on MLX's CUDA backend (issue 14). MLX runs a causal prefill's
// fused attention through cuDNN and keeps one cuDNN graph per query/key shape and strides; building
// one costs 40-60 ms on an H200 (and as much again for the first decode step's graph when the KV
// buffer reaches a new multiple of 256), against 16 ms for a whole warm 512-token prefill of
// Qwen3-0.6B q4, so every prompt length a process has not seen pays it. Padded, the attention runs
// at a length that repeats: the queries with zero rows appended, the keys and values read further
// into the cache's own buffer (up to the end of its 256-position step, so the buffer, and with it
// every later step, is the one the unpadded prefill makes), the output's real rows kept. Under the
// causal mask a real row attends to the same keys as before, the extra keys masked out. Under a mask
// array (the batched path's left-padded causal mask, whose shape MLX keys the graph on too) the
// mask is widened with masked entries (padded_attention_mask), to the same effect.
//
// On by default wherever it applies (MLXRT_PAD_PREFILL_ATTENTION=0 turns it off), because it keeps
// the bytes as far as MLX itself does: on the op, padded equals unpadded byte for byte
// (bench/gpu/shape_cost.py bytes: 168 of 168 cases, 16/8 and 32/8 heads, 28 lengths, 3 offsets;
// --op-mask-rows checks the widened mask array the same way). A
// real row's scores, mask and softmax see the same keys in the same tiles; the padded rows and keys
// only add tiles that the causal mask empties. End to end MLX's cuDNN attention is itself not
// run-to-run stable past 255 keys on the H200 (bench/RESULTS.md, 2026-12-03), so there the claim is
// the op's; for prompts under 256 positions a GPU parity subset shows it end to end
// (docs/cuda-prefill-shapes.md). Everywhere else (CPU, Metal, attention cuDNN does not take: the
// unfused fallback's softmax would sum longer rows in another order) it never pads.

/** Whether environment variable `name` is set to exactly `value`. */
bool env_is(const char* name, const char* value) {
  const char* env = std::getenv(name);
  return env && std::string(env) == value;
}

bool padding_enabled() {
  static const bool on = !env_is("MLXRT_PAD_PREFILL_ATTENTION", "0");
  return on;
}

// MLXRT_PAD_PREFILL_ATTENTION=force pads wherever the shapes allow, on any device: a diagnostic
// that lets a machine without the GPU run the shapes the GPU would get (with
// MLXRT_ATTENTION_SHAPES=1, bench/attention_shape_survey.py). The padded attention's bytes are
// only claimed for cuDNN's; elsewhere the softmax sums the longer rows in another order.
bool padding_forced() {
  static const bool on = env_is("MLXRT_PAD_PREFILL_ATTENTION", "force");
  return on;
}

// MLXRT_ATTENTION_SHAPES=1: every fused attention call writes the shapes MLX's cuDNN graph cache
// would key it on to stderr (kind, queries, keys, mask, the KV buffer the keys are read from).
void log_attention_shapes(const char* kind, const mx::array& q, const mx::array& k, const std::optional<mx::array>& mask,
                          const std::optional<mx::array>& buffer) {
  static const bool on = std::getenv("MLXRT_ATTENTION_SHAPES") != nullptr;
  if (!on) return;
  auto shape = [](const std::optional<mx::array>& a) {
    if (!a) return std::string("-");
    std::string s = "[";
    for (int d : a->shape()) s += (s.size() > 1 ? "," : "") + std::to_string(d);
    return s + "]";
  };
  std::fprintf(stderr, "attention shapes: %s q=%s k=%s mask=%s buffer=%s\n", kind, shape(q).c_str(), shape(k).c_str(),
               shape(mask).c_str(), shape(buffer).c_str());
}

// On by default (MLXRT_PAD_MASKED_CONTIGUOUS=0 turns it off; its bytes were checked on the H200:
// docs/cuda-prefill-shapes.md): a chunk under a mask array takes its keys and values as a contiguous [B, H, Tp, D] copy padded with zeros to
// the next multiple of 256, instead of a prefix of the cache's buffer. The batched caches size
// their buffers to their longest row when they merge (prompt-cache hits), trim them when rows
// leave, and grow them from there, as mlx-lm's do; a prefix's strides carry that capacity and
// cuDNN keys its graph on them, so under a server's load those chunks build new graphs (the
// attention shape survey, bench/RESULTS.md, 2026-12-04 ninth session). Copied, the shape depends
// on the rows, the padded query count and Tp alone.
bool masked_contiguous_enabled() {
  static const bool on = !env_is("MLXRT_PAD_MASKED_CONTIGUOUS", "0");
  return on;
}

// Chunks under a mask array at offsets off the 256-position step, padded to padded_query_count
// queries (below). cuDNN builds and compiles a graph for each new masked shape, 1-1.5 s on an H200
// (bench/RESULTS.md, 2026-12-04), and every prompt-cache hit of the server's batched path lands at
// such an offset. On by default since the op's byte check on the GPU passed (bench/gpu/shape_cost.py
// bytes --op-mask-rows 3 --op-any-offset: 48 of 48, 32/8 and 16/8 heads);
// MLXRT_PAD_MASKED_ANY_OFFSET=0 turns it off.
bool masked_any_offset_enabled() {
  static const bool on = !env_is("MLXRT_PAD_MASKED_ANY_OFFSET", "0");
  return on;
}

// On by default with the contiguous copy above (MLXRT_PAD_MASKED_ROWS=0 turns it off): such a chunk
// also pads its batch rows to padded_row_count. cuDNN's graph key has the row count in it, so a
// server's prompt batches (every count from 1 to --prompt-concurrency as requests arrive) built a
// graph per count, 48-120 ms each while requests waited, and its warm-up had to run every count
// (5825 prompts in 44 s at --prompt-concurrency 32 on the H200; bench/RESULTS.md, 2026-12-04,
// twelfth session). cuDNN's fused kernel works on each (row, head) apart, so an added row (zero
// queries, keys and values, every mask entry masked, dropped after) leaves the real rows' bytes as
// they were (bench/gpu/shape_cost.py bytes --op-pad-rows).
bool masked_rows_enabled() {
  static const bool on = !env_is("MLXRT_PAD_MASKED_ROWS", "0");
  return on;
}

/** MLX's CUDA backend is the default device's and takes fused attention through cuDNN
 * (supports_sdpa_cudnn in mlx/backend/cuda/scaled_dot_product_attention.cpp, MLX 0.32.4: compute
 * capability 8 or more, MLX_CUDA_USE_CUDNN_SDPA not 0). */
bool cudnn_attention_device() {
  if (padding_forced()) return true;
  static const bool cudnn_gpu = [] {
    if (!mx::cu::is_available()) return false;
    const char* env = std::getenv("MLX_CUDA_USE_CUDNN_SDPA");
    if (env && std::atoi(env) == 0) return false;
    const auto& info = mx::device_info(mx::Device::gpu);
    auto it = info.find("compute_capability_major");
    return it != info.end() && std::get<size_t>(it->second) >= 8;
  }();
  return cudnn_gpu && mx::default_device() == mx::Device::gpu;
}

/** Whether MLX's CUDA backend runs this attention through cuDNN (supports_sdpa_cudnn in
 * mlx/backend/cuda/scaled_dot_product_attention.cpp, MLX 0.32.4), for a prefill query. */
bool runs_on_cudnn(const mx::array& q, const mx::array& k, const mx::array& v) {
  if (!cudnn_attention_device()) return false;
  auto head_ok = [](int d) { return d % 8 == 0 && d <= 128; };
  return (q.dtype() == mx::bfloat16 || q.dtype() == mx::float16) && k.dtype() == q.dtype() &&
         v.dtype() == q.dtype() && head_ok(q.shape(-1)) && head_ok(v.shape(-1)) && q.shape(2) <= k.shape(2);
}

}  // namespace

std::optional<mx::array> padded_attention_mask(const mx::array& mask, int L, int Tk, int Lp, int Tp) {
  if (mask.ndim() < 2 || mask.shape(-1) != Tk || (mask.shape(-2) != L && mask.shape(-2) != 1)) return std::nullopt;
  const int rows = mask.shape(-2) == 1 ? 0 : Lp - L;
  const mx::array fill = mask.dtype() == mx::bool_
                             ? mx::array(false)
                             : mx::array(-std::numeric_limits<float>::infinity(), mask.dtype());
  const int nd = static_cast<int>(mask.ndim());
  return mx::pad(mask, {nd - 2, nd - 1}, {0, 0}, {rows, Tp - Tk}, fill);
}

namespace {

/** The prefill attention at padded_attention_length (above), causal or under a mask array (the
 * batched path's left-padded causal mask, a window), or nullopt where it must run as it is. */
std::optional<mx::array> padded_prefill_attention(const mx::array& q, const cache::PlainKV& kv, float scale,
                                                  const std::optional<mx::array>& mask = std::nullopt) {
  const int L = q.shape(2), Tk = kv.keys.shape(2);
  if (L < 2 || !padding_enabled() || !kv.keys_buffer || !kv.values_buffer || !runs_on_cudnn(q, kv.keys, kv.values))
    return std::nullopt;
  // Only where the padded shape repeats: the padded query count is the bucket's end minus the
  // chunk's offset, so only chunks at a 256 boundary (a prompt's first chunk, and the chunks after a
  // full prefill step) share shapes. Elsewhere (a speculative verify window, a chunk after a
  // prompt-cache hit) the padded graph would be as new at each offset as the unpadded one, with up
  // to 255 more queries to compute (bench/RESULTS.md, 2026-12-03, third session).
  // Under a mask array the padded rows need not line up with the keys, so there a chunk at any
  // offset pads its queries to padded_query_count.
  const bool on_step = (Tk - L) % 256 == 0;
  if (!on_step && !(mask && masked_any_offset_enabled())) return std::nullopt;
  const bool contiguous = mask && masked_contiguous_enabled();
  const int Tp = contiguous ? (Tk + 255) / 256 * 256 : padded_attention_length(Tk, kv.keys_buffer->shape(2));
  const int Lp = on_step ? L + Tp - Tk : padded_query_count(L);  // never below L
  if (!contiguous && ((Tp == Tk && Lp == L) || kv.values_buffer->shape(2) < Tp)) return std::nullopt;
  // Rows are padded only where the mask has one row per batch row (the batched path's left padding).
  const int B = q.shape(0);
  const int Bp = contiguous && masked_rows_enabled() && mask->ndim() == 4 && mask->shape(0) == B ? padded_row_count(B)
                                                                                                : B;
  auto prefix = [](const mx::array& a, int n) {
    mx::Shape stop = a.shape();
    stop[2] = n;
    return mx::slice(a, mx::Shape(a.ndim(), 0), stop);
  };
  // Zeros appended to axes 0 (rows) and 2 (positions). The result is always a fresh row-major array,
  // padded or not: cuDNN keys its graph on strides as well, and the queries come as the model's
  // transposed view, so a chunk whose count needs no padding (exactly 16, 128, 256 queries) would
  // otherwise key another graph than the padded chunks of the same count (the server's warm-up runs
  // those exact counts).
  auto grown = [](const mx::array& a, int rows, int positions) {
    if (rows == a.shape(0) && positions == a.shape(2)) return mx::contiguous(a);
    return mx::contiguous(
        mx::pad(a, {0, 2}, {0, 0}, {rows - a.shape(0), positions - a.shape(2)}, mx::array(0, a.dtype())));
  };
  // The keys as a prefix of the cache's buffer: the queries get zero rows appended (as before the
  // contiguous mode, whose bytes the op checks compared).
  auto appended = [&] {
    if (Lp == L) return q;
    mx::Shape pad = q.shape();
    pad[2] = Lp - L;
    return mx::concatenate({q, mx::zeros(pad, q.dtype())}, 2);
  };
  if (!mask) {
    auto queries = appended();
    auto keys = prefix(*kv.keys_buffer, Tp);
    auto values = prefix(*kv.values_buffer, Tp);
    log_attention_shapes("padded causal", queries, keys, std::nullopt, kv.keys_buffer);
    return prefix(mx::fast::scaled_dot_product_attention(queries, keys, values, scale, "causal"), L);
  }
  auto wide = padded_attention_mask(*mask, L, Tk, Lp, Tp);
  if (!wide) return std::nullopt;
  if (Bp > B) {
    const mx::array fill = wide->dtype() == mx::bool_
                               ? mx::array(false)
                               : mx::array(-std::numeric_limits<float>::infinity(), wide->dtype());
    wide = mx::pad(*wide, {0}, {0}, {Bp - B}, fill);
  }
  auto queries = contiguous ? grown(q, Bp, Lp) : appended();
  auto keys = contiguous ? grown(kv.keys, Bp, Tp) : prefix(*kv.keys_buffer, Tp);
  auto values = contiguous ? grown(kv.values, Bp, Tp) : prefix(*kv.values_buffer, Tp);
  log_attention_shapes(contiguous ? "padded array, contiguous" : "padded array", queries, keys, *wide,
                       contiguous ? std::nullopt : kv.keys_buffer);
  auto out = prefix(mx::fast::scaled_dot_product_attention(queries, keys, values, scale, "array", *wide), L);
  if (Bp == B) return out;
  mx::Shape stop = out.shape();
  stop[0] = B;
  return mx::slice(out, mx::Shape(out.ndim(), 0), stop);
}

}  // namespace

bool prefill_attention_padded() { return padding_enabled() && cudnn_attention_device(); }

bool masked_prefill_contiguous() { return prefill_attention_padded() && masked_contiguous_enabled(); }

bool masked_prefill_rows_padded() { return masked_prefill_contiguous() && masked_rows_enabled(); }

namespace {

/** MLX's attention broadcasts a mask array to [B, heads, L, keys] at every call (fast.cpp), a node
 * in each layer of a step; the layers that share a mask share that broadcast instead: the same view
 * of the same mask, so the same bytes, in one node a step (a batched decode step on a GPU is bound
 * by the host's time per node). A bool mask only: MLX casts another dtype before broadcasting. */
mx::array shared_broadcast(const AttentionMask& mask, const mx::array& q, const mx::array& keys) {
  const auto& m = *mask.mask;
  if (m.dtype() != mx::bool_ || !mask.broadcasts) return m;
  auto shape = q.shape();
  shape.back() = keys.shape(-2);
  for (const auto& b : *mask.broadcasts)
    if (b.shape() == shape) return b;
  mask.broadcasts->push_back(mx::broadcast_to(m, shape));
  return mask.broadcasts->back();
}

mx::array fused_attention(const mx::array& q, const cache::PlainKV& kv, float scale, const AttentionMask& mask,
                          const std::optional<mx::array>& sinks = std::nullopt) {
  switch (mask.kind) {
    case AttentionMask::Kind::causal:
      if (!sinks)
        if (auto padded = padded_prefill_attention(q, kv, scale)) return *padded;
      log_attention_shapes("causal", q, kv.keys, std::nullopt, kv.keys_buffer);
      return mx::fast::scaled_dot_product_attention(q, kv.keys, kv.values, scale, "causal", std::nullopt, sinks);
    case AttentionMask::Kind::array:
      if (!sinks)
        if (auto padded = padded_prefill_attention(q, kv, scale, mask.mask)) return *padded;
      log_attention_shapes("array", q, kv.keys, mask.mask, kv.keys_buffer);
      return mx::fast::scaled_dot_product_attention(q, kv.keys, kv.values, scale, "array",
                                                    shared_broadcast(mask, q, kv.keys), sinks);
    case AttentionMask::Kind::none:
      break;
  }
  log_attention_shapes("none", q, kv.keys, std::nullopt, kv.keys_buffer);
  return mx::fast::scaled_dot_product_attention(q, kv.keys, kv.values, scale, "", std::nullopt, sinks);
}

cache::QuantizedTensor expand_heads(const cache::QuantizedTensor& t) {
  return {mx::expand_dims(t.packed, -3), mx::expand_dims(t.scales, -3), mx::expand_dims(t.biases, -3)};
}

mx::array quantized_attention(mx::array queries, const cache::QuantizedKV& kv, float scale,
                              const AttentionMask& mask) {
  const int B = queries.shape(0), n_q_heads = queries.shape(1), L = queries.shape(2), D = queries.shape(3);
  const int n_kv_heads = kv.keys.packed.shape(-3);
  const int n_repeats = n_q_heads / n_kv_heads;
  queries = mx::multiply(queries, mx::array(scale, queries.dtype()));
  auto keys = kv.keys, values = kv.values;
  if (n_repeats > 1) {
    queries = mx::reshape(queries, {B, n_kv_heads, n_repeats, L, D});
    keys = expand_heads(keys);
    values = expand_heads(values);
  }
  auto scores = mx::quantized_matmul(queries, keys.packed, keys.scales, keys.biases, true, kv.group_size, kv.bits);
  if (mask.kind != AttentionMask::Kind::none) {
    mx::array m = mx::array(false);
    if (mask.kind == AttentionMask::Kind::causal) {
      const int qL = scores.shape(-2), kL = scores.shape(-1);
      auto q_indices = mx::arange(kL - qL, kL);
      auto k_indices = mx::arange(kL);
      m = mx::greater_equal(mx::expand_dims(q_indices, 1), mx::expand_dims(k_indices, 0));
    } else {
      m = *mask.mask;
    }
    if (n_repeats > 1 && m.ndim() > 3) m = mx::expand_dims(m, -3);
    if (m.dtype() == mx::bool_) {
      scores = mx::where(m, scores, dtype_lowest(scores.dtype()));
    } else {
      scores = mx::add(scores, m);
    }
  }
  scores = mx::softmax(scores, -1, /*precise=*/true);
  auto out = mx::quantized_matmul(scores, values.packed, values.scales, values.biases, false, kv.group_size, kv.bits);
  if (n_repeats > 1) out = mx::reshape(out, {B, n_q_heads, L, D});
  return out;
}

}  // namespace

mx::array scaled_dot_product_attention(const mx::array& queries, const cache::CachedKV& kv, float scale,
                                       const AttentionMask& mask) {
  if (const auto* q = std::get_if<cache::QuantizedKV>(&kv)) return quantized_attention(queries, *q, scale, mask);
  return fused_attention(queries, std::get<cache::PlainKV>(kv), scale, mask);
}

mx::array scaled_dot_product_attention(const mx::array& queries, const cache::CachedKV& kv, float scale,
                                       const AttentionMask& mask, const mx::array& sinks) {
  if (std::holds_alternative<cache::QuantizedKV>(kv))
    throw UnsupportedError("Quantized SDPA does not support attention sinks. (--kv-bits cannot be used with this "
                           "model's attention sinks)");
  return fused_attention(queries, std::get<cache::PlainKV>(kv), scale, mask, sinks);
}

namespace {

// a[..., :n, :]
mx::array first_positions(const mx::array& a, int n) {
  mx::Shape stop = a.shape();
  stop[2] = n;
  return mx::slice(a, mx::Shape(a.ndim(), 0), stop);
}

/** The keys (or values) a one-token decoding step at a position with `keep` keys reads on a GPU: a
 * [..., :keep, :] view of a buffer of ceil(keep / 256) * 256 positions, the KVCache's capacity at
 * that step. MLX's CUDA attention depends on that buffer, not only on the keys: a one-query call
 * over 256 keys or more of a buffer whose length is a multiple of 256 runs cuDNN over the whole
 * buffer with a padding mask (use_cudnn_for_decoding and unslice_kv in
 * mlx/backend/cuda/scaled_dot_product_attention.cpp), anything else the vector kernel or the
 * unfused ops. `buffer` is the cache's (its first `have` positions written); `blocks` keeps the
 * copies made for other capacities, one per capacity, shared by the queries that need it. */
mx::array decode_step_view(const mx::array& buffer, int have, int keep, std::vector<std::optional<mx::array>>& blocks) {
  const int step = cache::KVCache::kStep;
  const int capacity = (keep + step - 1) / step * step;
  if (buffer.shape(2) == capacity) return keep == capacity ? buffer : first_positions(buffer, keep);
  auto& block = blocks[static_cast<size_t>(capacity / step)];
  if (!block) {
    // What the cache held at that step: the positions written so far, zeros after them.
    const int written = std::min(have, capacity);
    mx::Shape shape = buffer.shape();
    shape[2] = capacity;
    mx::Shape stop = shape;
    stop[2] = written;
    block = mx::slice_update(mx::zeros(shape, buffer.dtype()), first_positions(buffer, written),
                             mx::Shape(shape.size(), 0), stop);
  }
  return keep == capacity ? *block : first_positions(*block, keep);
}

}  // namespace

mx::array attend_each_query(const mx::array& queries, const cache::CachedKV& kv, const AttentionMask& mask,
                            const std::function<mx::array(const mx::array&, const cache::CachedKV&)>& one) {
  const auto* plain = std::get_if<cache::PlainKV>(&kv);
  if (!plain) throw UnsupportedError("--spec-exact: a quantized KV cache (--kv-bits) is not supported");
  if (mask.kind == AttentionMask::Kind::array)
    throw UnsupportedError("--spec-exact: this model's attention takes a mask array (a sliding window or padded "
                           "rows), which row-exact attention does not support");
  const int B = queries.shape(0), H = queries.shape(1), L = queries.shape(2), D = queries.shape(3);
  const int T = plain->keys.shape(2), Hkv = plain->keys.shape(1), Dv = plain->values.shape(3);
  // On a GPU each query reads its keys from a buffer shaped as the cache's was at its decoding step
  // (decode_step_view); the CPU computes the same bytes from any view of the same keys.
  const bool as_decode_buffer = mx::default_device() != mx::Device::cpu;
  const mx::array key_buffer = plain->keys_buffer.value_or(plain->keys);
  const mx::array value_buffer = plain->values_buffer.value_or(plain->values);
  const int step = cache::KVCache::kStep;
  std::vector<std::optional<mx::array>> key_blocks(static_cast<size_t>(T / step + 2)), value_blocks(key_blocks.size());
  std::vector<mx::array> rows;
  rows.reserve(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    // mlx-lm passes no mask for one query.
    const int keep = mask.kind == AttentionMask::Kind::causal ? T - L + l + 1 : T;
    cache::CachedKV prefix =
        as_decode_buffer
            ? cache::PlainKV{decode_step_view(key_buffer, T, keep, key_blocks),
                             decode_step_view(value_buffer, T, keep, value_blocks)}
            : cache::PlainKV{mx::slice(plain->keys, {0, 0, 0, 0}, {B, Hkv, keep, D}),
                             mx::slice(plain->values, {0, 0, 0, 0}, {B, Hkv, keep, Dv})};
    rows.push_back(one(mx::slice(queries, {0, 0, l, 0}, {B, H, l + 1, D}), prefix));
  }
  return mx::concatenate(rows, 2);
}

}  // namespace mlxrt::model::nn
