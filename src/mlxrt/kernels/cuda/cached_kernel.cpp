// CachedKernel: MLX's custom-kernel primitive made once per distinct launch, compiled by MLX or by
// mlxrt. Why: cached_kernel.h.
#include "mlxrt/kernels/cuda/cached_kernel.h"

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mlx/version.h>
#include <mlx/device.h>
#include <mlx/stream.h>

#include "mlxrt/kernels/cuda/kernel_image_cache.h"
#include "mlxrt/kernels/cuda/nvrtc.h"

namespace mlxrt::kernels::cuda {

namespace {

// NVRTC and the options for this process's GPU, found once (nvrtc is null where they were not).
struct Toolchain {
  std::unique_ptr<Nvrtc> nvrtc;
  std::vector<std::string> options;
  std::string compiler_key;  // what an image depends on besides its text: NVRTC's version, the options
  std::unique_ptr<KernelImageCache> cache;
};

size_t info_number(const std::unordered_map<std::string, std::variant<std::string, size_t>>& info,
                   const std::string& key) {
  auto it = info.find(key);
  if (it == info.end() || !std::holds_alternative<size_t>(it->second))
    throw NvrtcError("the GPU's device_info has no " + key + " (not a CUDA device)");
  return std::get<size_t>(it->second);
}

const Toolchain& toolchain() {
  static const Toolchain found = [] {
    Toolchain t;
    try {
      t.nvrtc = std::make_unique<Nvrtc>();
      const auto include = find_cuda_include_dir(*t.nvrtc);
      if (include.empty())
        throw NvrtcError("no CUDA headers with cuda_bf16.h found (MLXRT_CUDA_INCLUDE_DIR names their folder)");
      const auto& info = mx::device_info(mx::Device::gpu);
      t.options = device_options(static_cast<int>(info_number(info, "compute_capability_major")),
                                 static_cast<int>(info_number(info, "compute_capability_minor")), include);
      t.compiler_key = fmt::format("nvrtc {}.{} {}", t.nvrtc->major(), t.nvrtc->minor(), fmt::join(t.options, " "));
      t.cache = std::make_unique<KernelImageCache>(default_image_cache_dir(mx::version()));
    } catch (const std::exception& e) {
      t.nvrtc.reset();
      std::fprintf(stderr, "[mlxrt] MLXRT_CUDA_SELF_COMPILE: %s; MLX compiles the kernels instead\n", e.what());
    }
    return t;
  }();
  return found;
}

}  // namespace

bool self_compile_opted_in() {
  const char* v = std::getenv("MLXRT_CUDA_SELF_COMPILE");
  return v && std::string(v) == "1";
}

CachedKernel::CachedKernel(KernelSpec spec)
    : spec_(std::move(spec)),
      shapes_read_(shapes_read(spec_)),
      kernel_(mx::fast::cuda_kernel(spec_.name, spec_.input_names, spec_.output_names, spec_.source, spec_.header,
                                    spec_.ensure_row_contiguous, spec_.shared_memory)) {}

bool CachedKernel::self_compiled() const {
  return spec_.self_compile && self_compile_opted_in() && toolchain().nvrtc != nullptr;
}

std::vector<mx::array> CachedKernel::operator()(
    const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& output_shapes,
    const std::vector<mx::Dtype>& output_dtypes, std::tuple<int, int, int> grid, std::tuple<int, int, int> threadgroup,
    const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args, std::optional<float> init_value,
    bool verbose, mx::StreamOrDevice s) const {
  if (init_value || verbose || !std::holds_alternative<std::monostate>(s))
    return kernel_(inputs, output_shapes, output_dtypes, grid, threadgroup, template_args, init_value, verbose, s);
  const bool own = self_compiled();
  // What the primitive MLX would build holds: its stream, the template arguments' values (their
  // names are the call site's, fixed), the signature's types (an input's shape parameters only
  // where it has dimensions), the launch dimensions. A self-compiled one also holds the read
  // shapes' sizes, as scalars.
  std::vector<int64_t> key;
  key.reserve(12 + template_args.size() + inputs.size() + output_dtypes.size());
  key.push_back(mx::default_stream(mx::default_device()).index);
  for (const auto& [name, arg] : template_args)
    key.push_back(std::visit(
        [](const auto& v) -> int64_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, mx::Dtype>)
            return 1000 + static_cast<int>(v.val());
          else
            return static_cast<int64_t>(v);
        },
        arg));
  for (const auto& in : inputs) key.push_back(static_cast<int>(in.dtype().val()) * 2 + (in.ndim() > 0));
  for (const auto& t : output_dtypes) key.push_back(static_cast<int>(t.val()));
  for (const int v : {std::get<0>(grid), std::get<1>(grid), std::get<2>(grid), std::get<0>(threadgroup),
                      std::get<1>(threadgroup), std::get<2>(threadgroup)})
    key.push_back(v);
  if (own) {
    key.push_back(-1);  // apart from MLX-compiled launches
    for (size_t i = 0; i < inputs.size() && i < shapes_read_.size(); ++i)
      if (shapes_read_[i]) {
        key.push_back(inputs[i].ndim());
        for (const int d : inputs[i].shape()) key.push_back(d);
      }
  }
  {
    std::lock_guard lock(mutex_);
    if (auto it = launches_.find(key); it != launches_.end())
      return mx::array::make_arrays(output_shapes, output_dtypes, it->second, inputs);
  }
  auto outputs =
      own ? launch_self_compiled(inputs, output_shapes, output_dtypes, grid, threadgroup, template_args)
          : kernel_(inputs, output_shapes, output_dtypes, grid, threadgroup, template_args, std::nullopt, false, {});
  std::lock_guard lock(mutex_);
  launches_.emplace(std::move(key), outputs.front().primitive_ptr());
  return outputs;
}

std::vector<mx::array> CachedKernel::launch_self_compiled(
    const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& output_shapes,
    const std::vector<mx::Dtype>& output_dtypes, std::tuple<int, int, int> grid, std::tuple<int, int, int> threadgroup,
    const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args) const {
  std::vector<mx::Dtype> types;
  std::vector<mx::Shape> shapes;
  for (const auto& in : inputs) {
    types.push_back(in.dtype());
    shapes.push_back(in.shape());
  }
  const auto text = self_contained_source(spec_, types, shapes, output_dtypes, template_args);
  std::string image;
  {
    std::lock_guard lock(mutex_);
    auto it = images_.find(text);
    if (it == images_.end()) {
      const auto& tc = toolchain();
      try {
        auto stored = tc.cache->load(text, tc.compiler_key);
        if (!stored) {
          stored = tc.nvrtc->compile(text, spec_.name + ".cu", tc.options);
          tc.cache->store(text, tc.compiler_key, *stored);
        }
        it = images_.emplace(text, std::move(*stored)).first;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[mlxrt] MLXRT_CUDA_SELF_COMPILE: %s; MLX compiles %s instead\n", e.what(),
                     spec_.name.c_str());
        it = images_.emplace(text, std::string()).first;
      }
    }
    image = it->second;
  }
  if (image.empty())
    return kernel_(inputs, output_shapes, output_dtypes, grid, threadgroup, template_args, std::nullopt, false, {});
  return mx::fast::precompiled_cuda_kernel(spec_.name, image, inputs, output_shapes, output_dtypes,
                                           shape_scalars(spec_, shapes), grid, threadgroup, spec_.shared_memory,
                                           std::nullopt, spec_.ensure_row_contiguous, {});
}

}  // namespace mlxrt::kernels::cuda
