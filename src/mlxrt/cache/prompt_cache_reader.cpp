// Reads mlx-lm's prompt-cache files (load_prompt_cache, mlx_lm/models/cache.py, mlx-lm 0.32.2)
// and refuses anything mlx-lm's from_state would not turn into a working cache.
#include "mlxrt/cache/prompt_cache_reader.h"

#include <algorithm>
#include <exception>
#include <string>

#include <mlx/io.h>
#include <mlx/ops.h>

#include "mlxrt/cache/arrays_cache.h"
#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/io/safetensors_header.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cache {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string shape_str(const mx::array& a) {
  std::string s = "[";
  for (int i = 0; i < static_cast<int>(a.ndim()); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

}  // namespace

PromptCacheReader::PromptCacheReader(const std::filesystem::path& path) : source_(path.string()) {
  io::SafetensorsHeader header;
  try {
    header = io::read_safetensors_header(path);
  } catch (const WeightsError& e) {
    throw ConfigError(std::string(e.what()) + " (expected a prompt-cache file)");
  }
  const auto& meta = header.metadata;
  for (int i = 0;; ++i) {
    auto it = meta.find("1." + std::to_string(i));
    if (it == meta.end()) break;
    classes_.push_back(it->second);
  }
  if (classes_.empty() || meta.find("2.0") == meta.end())
    fail("not a prompt-cache file: no cache class list (metadata \"1.0\", \"2.0\" as mlx-lm's save_prompt_cache "
         "writes them)");
  for (int n = 1;; ++n) {
    const std::string k = "2." + std::to_string(n);
    auto key = meta.find(k + ".0"), type = meta.find(k + ".1");
    if (key == meta.end() && type == meta.end()) break;
    if (key == meta.end() || type == meta.end()) fail("scalar table entry \"" + k + "\" is incomplete");
    if (type->second != "scalar" && type->second != "string" && type->second != "none")
      fail("unknown scalar type \"" + type->second + "\" in metadata \"" + k + ".1\"");
    scalar_types_[key->second] = type->second;
  }
  for (const auto& [k, v] : meta)
    if (starts_with(k, "0.")) user_metadata_[k.substr(2)] = v;
  try {
    arrays_ = mx::load_safetensors(source_).first;
  } catch (const std::exception& e) {
    fail(std::string("cannot read the tensors: ") + e.what());
  }
}

void PromptCacheReader::fail(const std::string& what) const {
  throw ConfigError(source_ + ": invalid prompt-cache file: " + what);
}

const mx::array& PromptCacheReader::tensor(const std::string& key, int ndim) {
  auto it = arrays_.find(key);
  if (it == arrays_.end()) fail("missing tensor \"" + key + "\"");
  if (static_cast<int>(it->second.ndim()) != ndim)
    fail("tensor \"" + key + "\" has shape " + shape_str(it->second) + ", expected " + std::to_string(ndim) +
         " dimensions");
  used_.insert(key);
  return it->second;
}

std::optional<mx::array> PromptCacheReader::tensor_or_none(const std::string& key, int ndim) {
  auto type = scalar_types_.find(key);
  if (type != scalar_types_.end()) {
    if (type->second != "none") fail("\"" + key + "\" is a " + type->second + ", expected an array");
    tensor(key, 1);
    return std::nullopt;
  }
  return tensor(key, ndim);
}

std::optional<QuantizedTensor> PromptCacheReader::quantized_or_none(const std::string& key) {
  auto type = scalar_types_.find(key);
  if (type != scalar_types_.end()) {
    if (type->second != "none") fail("\"" + key + "\" is a " + type->second + ", expected quantized arrays");
    tensor(key, 1);
    return std::nullopt;
  }
  QuantizedTensor t{tensor(key + ".0", 4), tensor(key + ".1", 4), tensor(key + ".2", 4)};
  if (t.packed.dtype() != mx::uint32) fail("tensor \"" + key + ".0\" must be uint32 (packed quantized values)");
  return t;
}

int PromptCacheReader::scalar(const std::string& key, int min_value) {
  auto type = scalar_types_.find(key);
  if (type == scalar_types_.end() || type->second != "scalar") fail("\"" + key + "\" must be a scalar");
  const auto& a = tensor(key, 0);
  if (!mx::issubdtype(a.dtype(), mx::integer) && a.dtype() != mx::bool_)
    fail("scalar \"" + key + "\" must be an integer");
  const auto v = mx::astype(a, mx::int64).item<int64_t>();
  if (v < min_value || v > (1ll << 30)) fail("scalar \"" + key + "\" = " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

std::unique_ptr<Cache> PromptCacheReader::layer(int i) {
  const auto& cls = classes_[i];
  const auto p = std::to_string(i);
  if (cls == "KVCache") return kv_cache(p);
  if (cls == "RotatingKVCache") return rotating_kv_cache(p);
  if (cls == "QuantizedKVCache") return quantized_kv_cache(p);
  if (cls == "ArraysCache") return arrays_cache(p);
  fail("layer " + p + ": cache class \"" + cls +
       "\" is not supported (supported: KVCache, RotatingKVCache, QuantizedKVCache, ArraysCache)");
}

namespace {

// keys/values both present with matching [B, heads, L, D] prefixes, or both absent.
std::string kv_mismatch(const std::optional<mx::array>& k, const std::optional<mx::array>& v) {
  if (k.has_value() != v.has_value()) return "keys and values must both be present or both be none";
  if (!k) return "";
  for (int d = 0; d < 3; ++d)
    if (k->shape(d) != v->shape(d)) return "keys and values disagree in dimension " + std::to_string(d);
  if (k->dtype() != v->dtype()) return "keys and values have different dtypes";
  if (!mx::issubdtype(k->dtype(), mx::floating)) return "keys must be floating point";
  return "";
}

}  // namespace

std::unique_ptr<Cache> PromptCacheReader::kv_cache(const std::string& p) {
  auto keys = tensor_or_none(p + ".0", 4);
  auto values = tensor_or_none(p + ".1", 4);
  const int offset = scalar(p + ".2", 0);
  if (auto bad = kv_mismatch(keys, values); !bad.empty()) fail("layer " + p + ": " + bad);
  const int capacity = keys ? keys->shape(2) : 0;
  if (offset > capacity)
    fail("layer " + p + ": offset " + std::to_string(offset) + " exceeds the stored length " +
         std::to_string(capacity));
  auto c = std::make_unique<KVCache>();
  c->set_state(std::move(keys), std::move(values), offset);
  return c;
}

std::unique_ptr<Cache> PromptCacheReader::rotating_kv_cache(const std::string& p) {
  auto keys = tensor_or_none(p + ".0", 4);
  auto values = tensor_or_none(p + ".1", 4);
  const int offset = scalar(p + ".2", 0);
  const int keep = scalar(p + ".3", 0);
  const int max_size = scalar(p + ".4", 1);
  const int idx = scalar(p + ".5", 0);
  if (auto bad = kv_mismatch(keys, values); !bad.empty()) fail("layer " + p + ": " + bad);
  const int length = keys ? keys->shape(2) : 0;
  if (keep > max_size || idx > length || idx > offset)
    fail("layer " + p + ": inconsistent rotating cache (keep " + std::to_string(keep) + ", max_size " +
         std::to_string(max_size) + ", idx " + std::to_string(idx) + ", offset " + std::to_string(offset) +
         ", stored length " + std::to_string(length) + ")");
  // mlx-lm's buffer outgrows max_size only after a multi-token update, and then holds the tokens in
  // order with idx at its end; a longer, wrapped buffer would fail inside MLX at the next update.
  if (length > max_size && idx != length)
    fail("layer " + p + ": rotating cache stored length " + std::to_string(length) + " exceeds max_size " +
         std::to_string(max_size) + " (only an unwrapped buffer, idx " + std::to_string(length) +
         ", may exceed it; idx is " + std::to_string(idx) + ")");
  // The buffer holds every position still in the window: mlx-lm grows it to max_size before the
  // ring wraps. A shorter one would make the next update grow it by a negative size (inside MLX).
  if (length < std::min(offset, max_size))
    fail("layer " + p + ": rotating cache stored length " + std::to_string(length) + " is shorter than the " +
         std::to_string(std::min(offset, max_size)) + " positions its offset " + std::to_string(offset) +
         " and max_size " + std::to_string(max_size) + " keep");
  auto c = std::make_unique<RotatingKVCache>(max_size, keep);
  c->set_state(std::move(keys), std::move(values), offset, keep, max_size, idx);
  return c;
}

std::unique_ptr<Cache> PromptCacheReader::quantized_kv_cache(const std::string& p) {
  auto keys = quantized_or_none(p + ".0");
  auto values = quantized_or_none(p + ".1");
  const int offset = scalar(p + ".2", 0);
  const int group_size = scalar(p + ".3", 1);
  const int bits = scalar(p + ".4", 1);
  try {
    validate_kv_quantization(bits, group_size, 0);
  } catch (const UsageError& e) {
    fail("layer " + p + ": " + e.what());
  }
  if (keys.has_value() != values.has_value()) fail("layer " + p + ": keys and values must both be present");
  if (keys) {
    for (const auto* t : {&*keys, &*values}) {
      const auto& q = *t;
      for (int d = 0; d < 3; ++d)
        if (q.scales.shape(d) != q.packed.shape(d) || q.biases.shape() != q.scales.shape() ||
            q.packed.shape(d) != keys->packed.shape(d))
          fail("layer " + p + ": quantized keys/values have inconsistent shapes");
      // Packed words hold 32 / bits values; each group has one scale and bias.
      if (int64_t{q.packed.shape(3)} * 32 != int64_t{q.scales.shape(3)} * group_size * bits)
        fail("layer " + p + ": packed width " + std::to_string(q.packed.shape(3)) + " does not match " +
             std::to_string(q.scales.shape(3)) + " groups of " + std::to_string(group_size) + " at " +
             std::to_string(bits) + " bits");
    }
    if (offset > keys->packed.shape(2)) fail("layer " + p + ": offset exceeds the stored length");
  } else if (offset != 0) {
    fail("layer " + p + ": empty cache with offset " + std::to_string(offset));
  }
  auto c = std::make_unique<QuantizedKVCache>(group_size, bits);
  c->set_state(std::move(keys), std::move(values), offset, group_size, bits);
  return c;
}

std::unique_ptr<Cache> PromptCacheReader::arrays_cache(const std::string& p) {
  // state = (cache, left_padding, lengths), flattened as p.0.<slot>, p.1, p.2.
  std::vector<std::optional<mx::array>> slots;
  for (int j = 0;; ++j) {
    const auto key = p + ".0." + std::to_string(j);
    if (!arrays_.count(key)) break;
    auto type = scalar_types_.find(key);
    if (type != scalar_types_.end()) {
      if (type->second != "none") fail("\"" + key + "\" is a " + type->second + ", expected an array");
      tensor(key, 1);
      slots.emplace_back(std::nullopt);
      continue;
    }
    const auto& a = arrays_.at(key);
    if (a.ndim() < 1) fail("tensor \"" + key + "\" must have a batch dimension");
    used_.insert(key);
    slots.emplace_back(a);
  }
  if (slots.empty()) fail("layer " + p + ": ArraysCache without slots (expected tensors \"" + p + ".0.0\", ...)");
  for (const auto& key : {p + ".1", p + ".2"}) {
    auto type = scalar_types_.find(key);
    if (type == scalar_types_.end() || type->second != "none")
      fail("layer " + p + ": an ArraysCache with left padding or lengths (\"" + key +
           "\") belongs to a batch; only single-sequence caches can be loaded");
    tensor(key, 1);
  }
  auto c = std::make_unique<ArraysCache>(static_cast<int>(slots.size()));
  c->set_state(std::move(slots), 0);
  return c;
}

void PromptCacheReader::check_all_used() const {
  for (const auto& [key, _] : arrays_)
    if (!used_.count(key)) fail("tensor \"" + key + "\" belongs to no layer's state");
}

}  // namespace mlxrt::cache
