#include "mlxrt/convert/gguf_convert.h"
#include "mlxrt/convert/staging_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>
#include <unordered_map>

#include <mlx/mlx.h>
#include <nlohmann/json.hpp>

#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/convert/gguf_blocks.h"
#include "mlxrt/convert/gguf_file.h"
#include "mlxrt/convert/gguf_gated_delta.h"
#include "mlxrt/convert/gguf_gemma3n.h"
#include "mlxrt/convert/gguf_gemma4_experts.h"
#include "mlxrt/convert/gguf_tokenizer.h"
#include "mlxrt/convert/mapped_file.h"
#include "mlxrt/convert/progress.h"
#include "mlxrt/util/durable_file.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace mx = mlx::core;
namespace fs = std::filesystem;

namespace {

/** One GGUF tensor (or rows of a fused one) and where it goes. */
struct PlannedTensor {
  GgufTensorInfo info;  // offset from the start of the data section
  TensorPlan plan;
  std::optional<AffineParams> affine;  // set for blocks kept quantized
  bool mxfp4 = false;                  // MXFP4 blocks kept as MLX's mxfp4
  bool dense = false;                  // blocks stored dequantised as float32 (exact)
  uint64_t out_bytes = 0;
  int shard = 0;
  std::optional<mx::Dtype> narrow_to;  // plan.narrow, resolved against general.file_type
};

bool is_plain(GgmlType t) { return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16; }

mx::Dtype plain_dtype(GgmlType t) {
  return t == GgmlType::f32 ? mx::float32 : t == GgmlType::f16 ? mx::float16 : mx::bfloat16;
}

/** How one tensor (or part) is written, after checking that it can be. */
PlannedTensor plan_one(const GgufFile& file, const GgufTensorInfo& t, const TensorPlan& plan) {
  PlannedTensor p{t, plan, affine_params_for(t.type()), t.type() == GgmlType::mxfp4, has_exact_float32(t.type()), 0, 0, std::nullopt};
  if (!p.affine && !p.mxfp4 && !p.dense && !is_plain(t.type()))
    throw UnsupportedError(file.source + ": tensor '" + t.name + "' has type " + t.traits.name +
                           ", which the converter does not support (supported: " + supported_gguf_types() + ")");
  if ((p.affine || p.mxfp4 || p.dense) && t.dims.size() != 2 && t.dims.size() != 3)
    throw UnsupportedError(file.source + ": quantized tensor '" + t.name + "' has " + std::to_string(t.dims.size()) +
                           " dimensions; only 2-D quantized weights (and 3-D stacked experts) are supported");
  for (auto d : t.dims)
    if (d > static_cast<uint64_t>(INT32_MAX))
      throw UnsupportedError(file.source + ": tensor '" + t.name + "' has a dimension of " + std::to_string(d) +
                             ", larger than MLX arrays allow");
  if (p.mxfp4 && p.plan.qk_heads)
    throw UnsupportedError(file.source + ": tensor '" + t.name + "': MXFP4 rows cannot be un-permuted");
  if (p.affine) {
    uint64_t groups = t.rows() * (t.dims[0] / p.affine->group_size);
    p.out_bytes = t.n_elements * p.affine->bits / 8 + 2 * groups * sizeof(float);
  } else if (p.mxfp4) {
    p.out_bytes = t.n_elements / 2 + t.n_elements / 32;
  } else if (p.dense) {
    p.out_bytes = t.n_elements * sizeof(float);
  } else {
    p.out_bytes = t.n_bytes;
  }
  return p;
}

/** The 16-bit type llama.cpp's converter wrote the model's matrices in (general.file_type
 * MOSTLY_F16 = 1, MOSTLY_BF16 = 32), which its float32 vectors were widened from. */
std::optional<mx::Dtype> file_float_type(const GgufFile& file) {
  const auto type = file.get_uint("general.file_type");
  if (type == 1u) return mx::float16;
  if (type == 32u) return mx::bfloat16;
  return std::nullopt;
}

std::vector<PlannedTensor> plan_tensors(const GgufArchitecture& arch, const GgufFile& file,
                                        const nlohmann::ordered_json& config) {
  std::vector<PlannedTensor> out;
  const auto narrow_to = file_float_type(file);
  const bool gemma3n = std::string(arch.model_type) == "gemma3n";
  for (const auto& t : file.tensors) {
    auto plan = plan_tensor(arch, file, t);
    if (!plan) continue;
    if (gemma3n) keep_gemma3n_per_layer_rows(*plan, t, config);
    if (plan->row_parts.empty()) {
      out.push_back(plan_one(file, t, *plan));
      if (plan->narrow) out.back().narrow_to = narrow_to;
      continue;
    }
    // A fused tensor: one planned tensor per part, each a slice of its rows.
    uint64_t row = 0;
    for (const auto& [name, rows] : plan->row_parts) {
      TensorPlan part = *plan;
      part.hf_name = name;
      part.row_parts.clear();
      out.push_back(plan_one(file, slice_rows(t, row, rows), part));
      if (part.narrow) out.back().narrow_to = narrow_to;
      row += rows;
    }
  }
  return out;
}

/** Module path of a weight ("model.layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj"). */
std::string module_of(const std::string& hf_name) { return hf_name.substr(0, hf_name.rfind('.')); }

/** A module's packing: (bits, group size, MLX mode). */
using Packing = std::tuple<int, int, std::string>;

std::optional<Packing> packing_of(const PlannedTensor& t) {
  if (t.affine) return Packing{t.affine->bits, t.affine->group_size, "affine"};
  if (t.mxfp4) return Packing{4, 32, "mxfp4"};
  return std::nullopt;
}

nlohmann::ordered_json packing_json(const Packing& p) {
  return {{"group_size", std::get<1>(p)}, {"bits", std::get<0>(p)}, {"mode", std::get<2>(p)}};
}

/** The quantization section: the most common packing as the default, the others per module. */
std::optional<nlohmann::ordered_json> quantization_section(const std::vector<PlannedTensor>& tensors) {
  std::map<Packing, int> counts;
  for (const auto& t : tensors)
    if (auto p = packing_of(t)) ++counts[*p];
  if (counts.empty()) return std::nullopt;
  const Packing def = std::max_element(counts.begin(), counts.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; })->first;
  nlohmann::ordered_json q = packing_json(def);
  for (const auto& t : tensors) {
    auto p = packing_of(t);
    if (!p || *p == def) continue;
    const std::string module = module_of(t.plan.hf_name);
    if (module.ends_with(kGemma4FusedExperts)) {  // split in two after conversion
      const auto [gate, up] = gemma4_gate_up_modules(module);
      q[gate] = packing_json(*p);
      q[up] = packing_json(*p);
    } else {
      q[module] = packing_json(*p);
    }
  }
  return q;
}

template <typename T>
mx::array adopt(std::vector<T>&& values, mx::Shape shape, mx::Dtype dtype) {
  auto* holder = new std::vector<T>(std::move(values));
  return mx::array(holder->data(), std::move(shape), dtype, [holder](void*) { delete holder; });
}

/** The checkpoint arrays of one GGUF tensor, named as mlx-lm expects. */
void convert_tensor(const PlannedTensor& p, const uint8_t* data,
                    std::unordered_map<std::string, mx::array>& out) {
  const auto& t = p.info;
  std::vector<uint64_t> order;
  if (p.plan.qk_heads) order = unpermute_qk_rows(t.dims.size() == 1 ? t.dims[0] : t.rows(), *p.plan.qk_heads);
  const std::vector<uint64_t>* row_order = p.plan.qk_heads ? &order : nullptr;
  // Rows of every leading dimension in order: a [experts, out, in] tensor repacks as experts*out
  // rows and keeps its leading shape.
  mx::Shape lead;
  for (size_t i = t.dims.size(); i-- > 1;) lead.push_back(static_cast<int>(t.dims[i]));
  auto with_last = [&](int last) {
    mx::Shape s = lead;
    s.push_back(last);
    return s;
  };
  if (p.mxfp4) {
    Mxfp4Tensor m = repack_mxfp4(t, data);
    out.emplace(p.plan.hf_name, adopt(std::move(m.weight), with_last(static_cast<int>(m.cols / 8)), mx::uint32));
    out.emplace(module_of(p.plan.hf_name) + ".scales", adopt(std::move(m.scales), with_last(static_cast<int>(m.cols / 32)), mx::uint8));
    return;
  }
  if (p.affine) {
    AffineTensor a = repack_affine(t, data, row_order);
    int groups = static_cast<int>(a.cols / a.params.group_size);
    std::string module = module_of(p.plan.hf_name);
    out.emplace(p.plan.hf_name, adopt(std::move(a.weight), with_last(static_cast<int>(a.cols * a.params.bits / 32)), mx::uint32));
    out.emplace(module + ".scales", adopt(std::move(a.scales), with_last(groups), mx::float32));
    out.emplace(module + ".biases", adopt(std::move(a.biases), with_last(groups), mx::float32));
    return;
  }
  if (p.plan.split_rows) {
    // One 1-D tensor per row (plan_tensor checked a plain 2-D type): StableLM's per-head norms.
    const uint64_t row_bytes = t.n_bytes / t.rows();
    const auto at = p.plan.hf_name.find('#');
    for (uint64_t r = 0; r < t.rows(); ++r) {
      std::vector<uint8_t> bytes(data + r * row_bytes, data + (r + 1) * row_bytes);
      std::string name = p.plan.hf_name.substr(0, at) + std::to_string(r) + p.plan.hf_name.substr(at + 1);
      out.emplace(std::move(name), adopt(std::move(bytes), {static_cast<int>(t.dims[0])}, plain_dtype(t.type())));
    }
    return;
  }
  mx::Shape shape;
  if (p.plan.as_row) shape.push_back(1);
  for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it) shape.push_back(static_cast<int>(*it));
  if (p.plan.as_conv) shape.push_back(1);  // MLX's Conv1d weight: [out, kernel, in / groups]
  if (p.dense) {
    out.emplace(p.plan.hf_name, adopt(dequantize_float32(t, data, row_order), std::move(shape), mx::float32));
    return;
  }
  if (p.plan.minus_one) {
    // weight - 1 in float32, as transformers reads a Gemma GGUF: 1 + (w - 1) gives the model back
    // the GGUF's own scale.
    if (t.type() != GgmlType::f32)
      throw UnsupportedError(t.name + ": a Gemma norm stored as " + t.traits.name + " (expected F32)");
    std::vector<float> values(t.n_elements);
    std::memcpy(values.data(), data, t.n_bytes);
    for (auto& v : values) v = v - 1.0f;
    out.emplace(p.plan.hf_name, adopt(std::move(values), std::move(shape), mx::float32));
    return;
  }
  std::vector<uint8_t> bytes = row_order ? permute_plain_rows(t, data, order)
                                         : std::vector<uint8_t>(data, data + t.n_bytes);
  mx::array array = adopt(std::move(bytes), std::move(shape), plain_dtype(t.type()));
  if (p.narrow_to) {
    // Back to the model's 16-bit type when that loses nothing, or when mlx-lm rounds it there too.
    mx::array narrow = mx::astype(array, *p.narrow_to);
    if (p.plan.narrow_rounds || mx::array_equal(mx::astype(narrow, mx::float32), array).item<bool>()) array = narrow;
  }
  out.emplace(p.plan.hf_name, std::move(array));
}

template <typename Json>
void write_json(const fs::path& path, const Json& value, const std::string& source) {
  std::string text;
  try {
    text = value.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(source + ": metadata holds text that is not valid UTF-8, cannot write " +
                      path.filename().string() + " (" + e.what() + ")");
  }
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f.flush()) throw ConfigError(path.string() + ": cannot write");
}

int assign_shards(std::vector<PlannedTensor>& tensors, uint64_t max_bytes) {
  int shard = 0;
  uint64_t used = 0;
  const PlannedTensor* last = nullptr;
  for (auto& t : tensors) {
    const bool together = last && !t.plan.keep_with.empty() && t.plan.keep_with == last->plan.keep_with;
    last = &t;
    if (used > 0 && used + t.out_bytes > max_bytes && !together) {
      ++shard;
      used = 0;
    }
    t.shard = shard;
    used += t.out_bytes;
  }
  return shard + 1;
}

std::string shard_name(int index, int count) {
  if (count == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", index + 1, count);
  return buf;
}

void write_tokenizer_files(const TokenizerFiles& tokenizer, const fs::path& dir, const std::string& source) {
  write_json(dir / "tokenizer.json", tokenizer.tokenizer, source);
  write_json(dir / "tokenizer_config.json", tokenizer.tokenizer_config, source);
  write_json(dir / "generation_config.json", tokenizer.generation_config, source);
}

GgufConvertSummary write_tokenizer_only(const GgufFile& file, const fs::path& out) {
  TokenizerFiles tokenizer = build_tokenizer_files(file);
  StagingDir staging(out, "--out");
  write_tokenizer_files(tokenizer, staging.path(), file.source);
  staging.commit();
  GgufConvertSummary summary;
  summary.model_type = file.get_string("general.architecture").value_or("");
  summary.tokenizer = true;
  return summary;
}

}  // namespace

GgufConvertSummary convert_gguf(const GgufConvertOptions& options) {
  MappedFile mapped(options.gguf);
  GgufFile file = parse_gguf(mapped.bytes(), mapped.size(), options.gguf.string());
  if (options.tokenizer_only) return write_tokenizer_only(file, options.out);
  const GgufArchitecture& arch = find_architecture(file);
  std::vector<std::string> notes;
  nlohmann::ordered_json config = build_model_config(arch, file, mapped.data() + file.data_start, &notes);
  std::vector<PlannedTensor> tensors = plan_tensors(arch, file, config);
  if (!has_tokenizer(file))
    throw ConfigError(file.source + ": no tokenizer in the file (metadata 'tokenizer.ggml.model' and "
                      "'tokenizer.ggml.tokens'); a checkpoint needs one");
  TokenizerFiles tokenizer = build_tokenizer_files(file);
  if (auto q = quantization_section(tensors)) {
    config["quantization"] = *q;
    config["quantization_config"] = *q;
  }

  // Values the file does not hold, taken from the family's published checkpoints: said even with
  // --quiet, since they are part of what the output means.
  for (const auto& note : notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  size_t dense = std::count_if(tensors.begin(), tensors.end(), [](const auto& t) { return t.dense; });
  if (dense > 0 && options.progress)
    std::fprintf(stderr, "note: %zu Q2_K/Q3_K/Q6_K/IQ tensor%s stored as float32 (exact; MLX has no 16-element quantization groups, "
                 "non-linear grids or lattice codebooks)\n",
                 dense, dense == 1 ? "" : "s");
  StagingDir staging(options.out, "--out");
  GgufConvertSummary summary;
  summary.model_type = arch.model_type;
  summary.shards = assign_shards(tensors, options.max_shard_bytes);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  Progress progress("converting " + options.gguf.filename().string(), tensors.size(), options.progress);
  size_t done = 0;
  for (int s = 0; s < summary.shards; ++s) {
    std::unordered_map<std::string, mx::array> arrays;
    for (const auto& t : tensors) {
      if (t.shard != s) continue;
      progress.update(done, t.info.name);
      convert_tensor(t, mapped.data() + file.data_start + t.info.offset, arrays);
      summary.bytes += t.out_bytes;
      ++done;
    }
    if (is_gated_delta(arch)) restore_gated_delta_layers(arch, file, arrays);
    if (std::string(arch.model_type) == "gemma4_text") split_gemma4_gate_up(arrays);
    for (const auto& [name, _] : arrays) weight_map[name] = shard_name(s, summary.shards);
    summary.tensors += arrays.size();
    mx::save_safetensors((staging.path() / shard_name(s, summary.shards)).string(), std::move(arrays),
                         {{"format", "mlx"}});
  }
  progress.update(done);
  if (summary.shards > 1)
    write_json(staging.path() / "model.safetensors.index.json",
               nlohmann::ordered_json{{"metadata", {{"total_size", summary.bytes}}}, {"weight_map", weight_map}},
               file.source);
  write_json(staging.path() / "config.json", config, file.source);
  write_tokenizer_files(tokenizer, staging.path(), file.source);
  summary.tokenizer = true;
  staging.commit();
  return summary;
}

}  // namespace mlxrt::convert
