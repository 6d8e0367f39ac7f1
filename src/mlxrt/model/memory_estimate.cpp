// The memory a run needs (mlxrt fit, server admission). The growth rules replayed below are those
// of mlx_lm/models/cache.py's KVCache, RotatingKVCache and QuantizedKVCache and of generate.py's
// generate_step / maybe_quantize_kv_cache (mlx-lm 0.32.2).
#include "mlxrt/model/memory_estimate.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <mlx/device.h>
#include <mlx/memory.h>
#include <mlx/ops.h>

#include "mlxrt/cache/arrays_cache.h"
#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/io/safetensors_header.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/model/make_prompt_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model {

namespace {

constexpr int kStep = 256;  // the step every KV cache class grows by

std::string dtype_name(mx::Dtype t) {
  switch (t) {
    case mx::float16: return "float16";
    case mx::bfloat16: return "bfloat16";
    case mx::float32: return "float32";
    case mx::uint32: return "uint32";
    default: return "dtype of " + std::to_string(t.size()) + " bytes";
  }
}

// A config integer, looked up at the top level, then in text_config (multimodal checkpoints).
std::optional<int> config_int(const io::ModelConfig& config, std::initializer_list<const char*> keys) {
  const auto& raw = config.raw();
  for (const json* scope : {&raw, raw.contains("text_config") ? &raw["text_config"] : nullptr}) {
    if (!scope || !scope->is_object()) continue;
    for (const char* k : keys) {
      auto it = scope->find(k);
      if (it != scope->end() && it->is_number_integer()) return it->get<int>();
    }
  }
  return std::nullopt;
}

template <class C>
void fill_kv(LayerCacheGeometry& g, const C& c) {
  auto b = c.buffers();
  if (!b) throw UnsupportedError("a KV layer cache stayed empty after one token: cannot size it");
  g.n_kv_heads = b->keys.shape(1);
  g.k_head_dim = b->keys.shape(3);
  g.v_head_dim = b->values.shape(3);
  g.dtype = dtype_name(b->keys.dtype());
  g.bytes_per_position = (b->keys.nbytes() + b->values.nbytes()) / static_cast<size_t>(b->keys.shape(2));
}

// One layer's cache, replayed in integers.
struct LayerState {
  const LayerCacheGeometry* g;
  bool quantized = false;
  long size = 0;  // positions allocated (keys.shape[2])
  long offset = 0;
  long idx = 0;  // rotating: next write position
  size_t bpp(size_t quantized_bpp) const { return quantized ? quantized_bpp : g->bytes_per_position; }
};

}  // namespace

size_t weights_bytes(const std::filesystem::path& dir) {
  size_t total = 0;
  for (const auto& f : io::find_weight_files(dir))
    for (const auto& t : io::read_safetensors_header(f).tensors) total += t.end - t.begin;
  return total;
}

ModelMemoryGeometry memory_geometry(const LoadedModel& loaded, std::optional<int> max_kv_size) {
  ModelMemoryGeometry out;
  auto& lm = *loaded.model;
  // One token through the graph, not evaluated: each cache then holds arrays of the shapes and
  // dtypes the family stores, and no weight is read.
  auto cache = make_prompt_cache(lm, max_kv_size);
  (void)lm(mx::zeros({1, 1}, mx::int32), &cache);
  size_t itemsize = 0;
  for (size_t i = 0; i < cache.size(); ++i) {
    LayerCacheGeometry g;
    const auto* c = cache[i].get();
    if (const auto* kv = dynamic_cast<const cache::KVCache*>(c)) {
      g.kind = LayerCacheGeometry::Kind::kv;
      fill_kv(g, *kv);
      itemsize = std::max(itemsize, kv->buffers()->keys.itemsize());
    } else if (const auto* r = dynamic_cast<const cache::RotatingKVCache*>(c)) {
      g.kind = LayerCacheGeometry::Kind::rotating;
      fill_kv(g, *r);
      g.max_size = r->max_size();
      g.keep = r->keep();
      itemsize = std::max(itemsize, r->buffers()->keys.itemsize());
    } else if (const auto* q = dynamic_cast<const cache::QuantizedKVCache*>(c)) {
      auto b = q->buffers();
      if (!b) throw UnsupportedError("a quantized layer cache stayed empty after one token: cannot size it");
      g.kind = LayerCacheGeometry::Kind::quantized;
      g.n_kv_heads = b->keys.scales.shape(1);
      g.k_head_dim = b->keys.scales.shape(3) * b->group_size;
      g.v_head_dim = b->values.scales.shape(3) * b->group_size;
      g.dtype = "quantized " + std::to_string(b->bits) + "-bit";
      g.bytes_per_position = q->nbytes() / static_cast<size_t>(b->keys.packed.shape(2));
    } else if (const auto* a = dynamic_cast<const cache::ArraysCache*>(c)) {
      g.kind = LayerCacheGeometry::Kind::arrays;
      g.state_bytes = a->nbytes();
      for (const auto& s : a->slots())
        if (s) g.dtype = dtype_name(s->dtype());
    } else {
      throw UnsupportedError("layer " + std::to_string(i) +
                             ": the memory estimate does not know this layer cache's class");
    }
    out.layers.push_back(g);
  }
  const auto& config = loaded.config;
  out.weights_bytes = weights_bytes(config.dir());
  out.act_itemsize = itemsize ? itemsize : 2;
  out.vocab_size = lm.vocab_size();
  auto need = [&](std::initializer_list<const char*> keys, const char* what) {
    auto v = config_int(config, keys);
    if (!v || *v < 1) {
      std::string names;
      for (const char* k : keys) names += (names.empty() ? "" : ", ") + std::string(k);
      throw ConfigError(config.source() + ": the memory estimate needs the " + what + " (one of " + names + ")");
    }
    return *v;
  };
  out.hidden_size = need({"hidden_size", "d_model", "n_embd", "dim"}, "hidden size");
  int kv_heads = 0;
  for (const auto& l : out.layers) kv_heads = std::max(kv_heads, l.n_kv_heads);
  out.n_heads = config_int(config, {"num_attention_heads", "n_heads", "n_head"}).value_or(kv_heads);
  const int mlp = need({"intermediate_size", "block_ff_dim", "ffn_dim", "ff_dim", "d_ff", "n_inner",
                        "moe_intermediate_size"},
                       "MLP size");
  // Mixture of experts: every token goes through num_experts_per_tok experts of the expert size.
  if (auto k = config_int(config, {"num_experts_per_tok", "moe_topk", "top_k"})) {
    const int expert = config_int(config, {"moe_intermediate_size", "expert_intermediate_size"}).value_or(mlp);
    out.intermediate_size = std::max(mlp, *k * expert);
  } else {
    out.intermediate_size = mlp;
  }
  return out;
}

KvBytes sequence_kv_bytes(const ModelMemoryGeometry& g, const RunShape& run) {
  using Kind = LayerCacheGeometry::Kind;
  const long context = run.context;
  const long prompt = std::clamp<long>(run.prompt.value_or(run.context), 1, context);
  std::vector<LayerState> layers;
  std::vector<size_t> qbpp;
  for (const auto& l : g.layers) {
    layers.push_back(LayerState{&l});
    size_t q = 0;
    if (run.kv_bits && l.kind == Kind::kv) {
      const size_t words = static_cast<size_t>(l.k_head_dim + l.v_head_dim) * *run.kv_bits / 32;
      const size_t groups = static_cast<size_t>(l.k_head_dim + l.v_head_dim) / run.kv_group_size;
      q = l.n_kv_heads * (words * 4 + 2 * groups * g.act_itemsize);
    }
    qbpp.push_back(q);
  }
  auto layer_bytes = [&](size_t i) -> size_t {
    const auto& s = layers[i];
    if (s.g->kind == Kind::arrays) return s.offset > 0 ? s.g->state_bytes : 0;
    return static_cast<size_t>(s.size) * s.bpp(qbpp[i]);
  };
  KvBytes out;
  auto step = [&](long n) {
    size_t largest_old = 0;  // a buffer being replaced lives until its copy is made
    for (size_t i = 0; i < layers.size(); ++i) {
      auto& s = layers[i];
      const size_t before = layer_bytes(i);
      const long old_size = s.size;
      switch (s.g->kind) {
        case Kind::arrays:
          s.offset += n;
          break;
        case Kind::kv:
        case Kind::quantized:
          if (s.size == 0 || s.offset + n > s.size) {
            const long grow = (n + kStep - 1) / kStep * kStep;
            if (s.size > 0 && s.offset % kStep != 0) s.size = s.offset;
            s.size += grow;
          }
          s.offset += n;
          break;
        case Kind::rotating: {
          const long max = s.g->max_size, keep = s.g->keep;
          if (n > 1) {  // _update_concat
            if (s.size == 0) {
              s.size = n;
            } else {
              if (s.idx != s.size && s.idx >= s.offset) s.size = s.idx;  // _temporal_order
              const long trim = s.size - max + 1;
              if (trim > 0) s.size = keep + (s.size - trim - keep);
              s.size += n;
            }
            s.offset += n;
            s.idx = s.size;
          } else {  // _update_in_place
            if (s.size == 0 || (s.offset >= s.size && s.size < max)) {
              s.size += std::min<long>(kStep, max - s.offset);
              s.idx = s.offset;
            }
            if (s.size - max > 0) {
              s.size = max;
              s.idx = max;
            }
            if (s.idx == max) s.idx = keep;
            s.offset += 1;
            s.idx += 1;
          }
          break;
        }
      }
      if (s.size != old_size && old_size > 0) largest_old = std::max(largest_old, before);
      // maybe_quantize_kv_cache after the step.
      if (run.kv_bits && s.offset >= run.quantized_kv_start) {
        if (s.g->kind == Kind::kv && !s.quantized) {
          largest_old = std::max(largest_old, layer_bytes(i));
          s.quantized = true;
        } else if (s.g->kind == Kind::rotating) {
          throw UnsupportedError(
              "--kv-bits: a rotating KV cache (--max-kv-size or sliding-window layers) cannot be quantized "
              "(mlx-lm does not support it either); lower the context below --quantized-kv-start or drop --kv-bits");
        }
      }
    }
    size_t total = 0;
    for (size_t i = 0; i < layers.size(); ++i) total += layer_bytes(i);
    out.final_bytes = total;
    out.peak_bytes = std::max(out.peak_bytes, total + largest_old);
  };
  long processed = 0;
  while (prompt - processed > 1) {
    const long n = std::min<long>(run.prefill_step_size, prompt - processed - 1);
    step(n);
    processed += n;
  }
  // The last prompt token and every generated one run alone. Past a few steps nothing but the
  // 256-position growth changes, so whole stretches without a growth are skipped arithmetically.
  while (processed < context) {
    long skip = context - processed - 1;
    for (size_t i = 0; i < layers.size() && skip > 0; ++i) {
      const auto& s = layers[i];
      if (s.g->kind == Kind::arrays) continue;
      if (s.offset == 0) { skip = 0; break; }
      long room = s.size - s.offset - 1;  // single steps that neither grow nor trim
      if (s.g->kind == Kind::rotating && s.size >= s.g->max_size)
        room = s.size == s.g->max_size ? skip : 0;  // a full ring keeps its size
      if (run.kv_bits && s.g->kind == Kind::kv && !s.quantized)
        room = std::min<long>(room, run.quantized_kv_start - s.offset - 1);
      skip = std::min(skip, std::max<long>(room, 0));
    }
    if (skip > 0) {
      for (auto& s : layers) {
        if (s.g->kind == Kind::rotating && s.size == s.g->max_size && s.g->max_size > s.g->keep) {
          // The write position wraps from max_size back to keep.
          const long span = s.g->max_size - s.g->keep;
          s.idx = s.g->keep + ((s.idx == s.g->max_size ? 0 : s.idx - s.g->keep) + skip - 1) % span + 1;
        } else {
          s.idx += skip;
        }
        s.offset += skip;
      }
      processed += skip;
      continue;
    }
    step(1);
    processed += 1;
  }
  out.final_bytes *= static_cast<size_t>(run.batch);
  out.peak_bytes *= static_cast<size_t>(run.batch);
  return out;
}

DeviceMemory device_memory() {
  DeviceMemory out;
  const auto dev = mx::default_device();
  out.device = dev == mx::Device::gpu ? "gpu" : "cpu";
  const auto& info = mx::device_info(dev);
  auto number = [&](const char* key) -> size_t {
    auto it = info.find(key);
    if (it == info.end()) return 0;
    if (const auto* v = std::get_if<size_t>(&it->second)) return *v;
    return 0;
  };
  if (auto it = info.find("device_name"); it != info.end())
    if (const auto* v = std::get_if<std::string>(&it->second)) out.name = *v;
  out.total_bytes = std::max(number("total_memory"), number("memory_size"));
  if (out.device == "cpu") {
    // What the kernel says can be allocated without swapping.
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    size_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit) {
      if (key == "MemTotal:" && !out.total_bytes) out.total_bytes = kib * 1024;
      if (key == "MemAvailable:") {
        out.available_bytes = kib * 1024;
        out.available_source = "MemAvailable of /proc/meminfo";
      }
    }
    if (!out.available_bytes) {
      out.available_bytes = out.total_bytes;
      out.available_source = "total memory";
    }
  } else if (size_t free = number("free_memory")) {
    out.available_bytes = free + mx::get_active_memory() + mx::get_cache_memory();
    out.available_source = "free device memory (plus what MLX holds)";
  } else {
    out.available_bytes = out.total_bytes;
    out.available_source = "device memory size";
  }
  if (const size_t limit = mx::get_memory_limit(); out.device == "gpu" && limit && limit < out.available_bytes) {
    out.available_bytes = limit;
    out.available_source = "MLX's memory limit";
  }
  return out;
}

MemoryEstimate estimate_memory(const ModelMemoryGeometry& geometry, const RunShape& run) {
  if (run.context < 1) throw UsageError("--context must be at least 1, got " + std::to_string(run.context));
  if (run.batch < 1) throw UsageError("--batch must be at least 1, got " + std::to_string(run.batch));
  if (run.prefill_step_size < 1)
    throw UsageError("--prefill-step-size must be at least 1, got " + std::to_string(run.prefill_step_size));
  if (run.prompt && (*run.prompt < 1 || *run.prompt > run.context))
    throw UsageError("--prompt-tokens must be between 1 and --context (" + std::to_string(run.context) + "), got " +
                     std::to_string(*run.prompt));
  cache::validate_kv_quantization(run.kv_bits, run.kv_group_size, run.quantized_kv_start);
  if (run.kv_bits)
    for (const auto& l : geometry.layers)
      if (l.kind == LayerCacheGeometry::Kind::kv &&
          (l.k_head_dim % run.kv_group_size != 0 || l.v_head_dim % run.kv_group_size != 0))
        throw UsageError("--kv-group-size " + std::to_string(run.kv_group_size) +
                         " does not divide the model's head size " + std::to_string(l.k_head_dim));
  MemoryEstimate e;
  e.geometry = geometry;
  e.run = run;
  for (auto& l : e.geometry.layers)
    if (run.kv_bits && l.kind == LayerCacheGeometry::Kind::kv) {
      const size_t words = static_cast<size_t>(l.k_head_dim + l.v_head_dim) * *run.kv_bits / 32;
      const size_t groups = static_cast<size_t>(l.k_head_dim + l.v_head_dim) / run.kv_group_size;
      l.quantized_bytes_per_position = l.n_kv_heads * (words * 4 + 2 * groups * geometry.act_itemsize);
    }
  e.kv = sequence_kv_bytes(geometry, run);

  // The largest transient of one prefill step of L tokens (batch B, activation item size s):
  //   hidden  = 4 B L hidden s                 residual stream, normed input, attention output, sum
  //   qkv     = 2 B L (Hq Dk + Hkv (Dk + Dv)) s projections and their RoPE'd / transposed copies
  //   scores  = B Hq L Lkv s + L Lkv           only where attention is not fused (MLX's CPU backend
  //                                            composes it from matmul, a causal mask of booleans and
  //                                            a softmax that reuses the scores' buffer)
  //   mlp     = 3 B L I s                      gate, up and their product (I: MLP size, or
  //                                            experts-per-token x expert size for MoE)
  //   logits  = B V (s + 8)                    the last position's logits and float32 log-probs:
  //                                            generate_step computes logits for one position only
  //   activations = hidden + max(qkv + scores, mlp) + logits
  const long prompt = run.prompt.value_or(run.context);
  const long L = prompt > 1 ? std::min<long>(run.prefill_step_size, prompt - 1) : 1;
  const size_t B = run.batch, s = geometry.act_itemsize;
  long lkv = 0;
  int dk = 0, dv = 0, hkv = 0;
  for (const auto& l : geometry.layers) {
    if (l.kind == LayerCacheGeometry::Kind::arrays) continue;
    dk = std::max(dk, l.k_head_dim);
    dv = std::max(dv, l.v_head_dim);
    hkv = std::max(hkv, l.n_kv_heads);
    const long reach = l.kind == LayerCacheGeometry::Kind::rotating ? std::min<long>(l.max_size + L - 1, prompt - 1)
                                                                    : std::max<long>(prompt - 1, 1);
    lkv = std::max(lkv, reach);
  }
  const bool fused = mx::default_device() == mx::Device::gpu;
  const size_t hidden = 4 * B * L * geometry.hidden_size * s;
  const size_t qkv = 2 * B * L * (static_cast<size_t>(geometry.n_heads) * dk + static_cast<size_t>(hkv) * (dk + dv)) * s;
  const size_t scores =
      fused ? 0 : B * geometry.n_heads * L * static_cast<size_t>(lkv) * s + L * static_cast<size_t>(lkv);
  const size_t mlp = 3 * B * L * static_cast<size_t>(geometry.intermediate_size) * s;
  const size_t logits = B * static_cast<size_t>(geometry.vocab_size) * (s + 8);
  e.activations_bytes = hidden + std::max(qkv + scores, mlp) + logits;
  e.activation_terms = {{"prefill_step_tokens", L},
                        {"attended_positions", lkv},
                        {"attention_fused", fused},
                        {"hidden", hidden},
                        {"qkv", qkv},
                        {"attention_scores", scores},
                        {"mlp", mlp},
                        {"logits", logits},
                        {"formula", "hidden + max(qkv + attention_scores, mlp) + logits"}};

  e.peak_bytes = geometry.weights_bytes + e.kv.peak_bytes + e.activations_bytes;
  e.device = device_memory();
  // What the backend needs beside the arrays MLX counts: the allocator's rounding and free-list
  // slack (5%), and a fixed part (GPU: CUDA context, cuBLAS / cuDNN workspaces; CPU: threads and
  // the runtime).
  const size_t fixed = e.device.device == "gpu" ? (size_t{1} << 30) : (size_t{128} << 20);
  e.headroom_bytes = e.peak_bytes / 20 + fixed;
  e.required_bytes = e.peak_bytes + e.headroom_bytes;
  e.fits = e.required_bytes <= e.device.available_bytes;
  return e;
}

nlohmann::ordered_json to_json(const MemoryEstimate& e) {
  using Kind = LayerCacheGeometry::Kind;
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  // Layers with the same cache geometry are one entry, with their count.
  auto key = [](const LayerCacheGeometry& l) {
    std::ostringstream k;
    k << static_cast<int>(l.kind) << '/' << l.bytes_per_position << '/' << l.quantized_bytes_per_position << '/'
      << l.state_bytes << '/' << l.max_size << '/' << l.keep << '/' << l.dtype;
    return k.str();
  };
  std::vector<std::pair<std::string, nlohmann::ordered_json>> groups;
  for (const auto& l : e.geometry.layers) {
    const auto k = key(l);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == k; });
    if (it != groups.end()) {
      it->second["layers"] = it->second["layers"].get<int>() + 1;
      continue;
    }
    nlohmann::ordered_json j;
    const char* names[] = {"full_attention", "rotating", "quantized", "recurrent_state"};
    const char* classes[] = {"KVCache", "RotatingKVCache", "QuantizedKVCache", "ArraysCache"};
    j["type"] = names[static_cast<int>(l.kind)];
    j["cache"] = classes[static_cast<int>(l.kind)];
    j["layers"] = 1;
    j["dtype"] = l.dtype;
    if (l.kind == Kind::arrays) {
      j["state_bytes_per_sequence"] = l.state_bytes;
    } else {
      j["kv_heads"] = l.n_kv_heads;
      j["k_head_dim"] = l.k_head_dim;
      j["v_head_dim"] = l.v_head_dim;
      j["bytes_per_token"] = l.bytes_per_position;
      if (l.kind == Kind::kv && e.run.kv_bits) j["quantized_bytes_per_token"] = l.quantized_bytes_per_position;
      if (l.kind == Kind::rotating) {
        j["max_size"] = l.max_size;
        j["keep"] = l.keep;
      }
    }
    groups.emplace_back(k, std::move(j));
  }
  for (auto& g : groups) types.push_back(std::move(g.second));
  nlohmann::ordered_json run = {{"context", e.run.context},
                                {"prompt_tokens", e.run.prompt.value_or(e.run.context)},
                                {"batch", e.run.batch},
                                {"prefill_step_size", e.run.prefill_step_size}};
  run["max_kv_size"] = e.run.max_kv_size ? nlohmann::ordered_json(*e.run.max_kv_size) : nlohmann::ordered_json();
  run["kv_bits"] = e.run.kv_bits ? nlohmann::ordered_json(*e.run.kv_bits) : nlohmann::ordered_json();
  run["kv_group_size"] = e.run.kv_group_size;
  run["quantized_kv_start"] = e.run.quantized_kv_start;
  return {{"run", run},
          {"weights_bytes", e.geometry.weights_bytes},
          {"kv_cache",
           {{"layer_types", types}, {"bytes", e.kv.final_bytes}, {"peak_bytes", e.kv.peak_bytes}}},
          {"activations", {{"bytes", e.activations_bytes}, {"terms", e.activation_terms}}},
          {"peak_bytes", e.peak_bytes},
          {"headroom_bytes", e.headroom_bytes},
          {"required_bytes", e.required_bytes},
          {"device",
           {{"device", e.device.device},
            {"name", e.device.name},
            {"total_bytes", e.device.total_bytes},
            {"available_bytes", e.device.available_bytes},
            {"available_source", e.device.available_source}}},
          {"fits", e.fits}};
}

}  // namespace mlxrt::model
