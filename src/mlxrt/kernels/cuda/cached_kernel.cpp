// CachedKernel: MLX's custom-kernel primitive made once per distinct launch, compiled by MLX or by
// mlxrt. Why: cached_kernel.h.
#include "mlxrt/kernels/cuda/cached_kernel.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include <fmt/format.h>
#include <mlx/device.h>
#include <mlx/fast_primitives.h>
#include <mlx/stream.h>
#include <mlx/version.h>

#include "mlxrt/kernels/cuda/env_knob.h"
#include "mlxrt/kernels/cuda/mlx_kernel_cache.h"
#include "mlxrt/kernels/cuda/nvrtc.h"

namespace mlxrt::kernels::cuda {

namespace {

// NVRTC and the options for this process's GPU, found once (nvrtc is null where they were not).
struct Toolchain {
  std::unique_ptr<Nvrtc> nvrtc;
  std::vector<std::string> options;
  std::filesystem::path dir;  // MLX's kernel cache folder
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
      t.dir = mlx_ptx_cache_dir(mx::version());
    } catch (const std::exception& e) {
      t.nvrtc.reset();
      std::fprintf(stderr, "[mlxrt] MLXRT_CUDA_SELF_COMPILE: %s; MLX compiles the kernels instead\n", e.what());
    }
    return t;
  }();
  return found;
}

}  // namespace

bool self_compile_opted_in() { return env_flag("MLXRT_CUDA_SELF_COMPILE"); }

bool log_new_launches_opted_in() { return env_flag("MLXRT_CUDA_LOG_KERNELS"); }

void CachedKernel::log_new_launch(const std::vector<mx::array>& inputs,
                                  const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args,
                                  std::tuple<int, int, int> grid) const {
  std::string args;
  for (const auto& [name, arg] : template_args) {
    args += args.empty() ? "" : " ";
    args += name + "=" +
            std::visit(
                [](const auto& v) -> std::string {
                  if constexpr (std::is_same_v<std::decay_t<decltype(v)>, mx::Dtype>) {
                    std::ostringstream t;
                    t << v;
                    return t.str();
                  } else {
                    return std::to_string(v);
                  }
                },
                arg);
  }
  std::string shapes;
  for (const auto& in : inputs) {
    std::ostringstream one;
    one << in.shape();
    shapes += (shapes.empty() ? "" : " ") + one.str();
  }
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  std::fprintf(stderr, "[mlxrt] %.3f new launch of %s: %s; grid %d; inputs %s\n",
               std::chrono::duration<double>(since_epoch).count(), spec_.name.c_str(), args.c_str(),
               std::get<0>(grid), shapes.c_str());
}

CachedKernel::CachedKernel(KernelSpec spec)
    : spec_(std::move(spec)),
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
  // What the primitive MLX would build holds: its stream, the template arguments' values (their
  // names are the call site's, fixed), the signature's types (an input's shape parameters only
  // where it has dimensions), the launch dimensions.
  std::vector<int64_t> key;
  key.reserve(8 + template_args.size() + inputs.size() + output_dtypes.size());
  key.push_back(mx::default_stream(mx::default_device()).index);
  for (const auto& [name, arg] : template_args)
    key.push_back(std::visit(
        [](const auto& v) -> int64_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, mx::Dtype>) return 1000 + static_cast<int>(v.val());
          else return static_cast<int64_t>(v);
        },
        arg));
  for (const auto& in : inputs) key.push_back(static_cast<int>(in.dtype().val()) * 2 + (in.ndim() > 0));
  for (const auto& t : output_dtypes) key.push_back(static_cast<int>(t.val()));
  for (const int v : {std::get<0>(grid), std::get<1>(grid), std::get<2>(grid), std::get<0>(threadgroup),
                      std::get<1>(threadgroup), std::get<2>(threadgroup)})
    key.push_back(v);
  {
    std::lock_guard lock(mutex_);
    if (auto it = launches_.find(key); it != launches_.end())
      return mx::array::make_arrays(output_shapes, output_dtypes, it->second, inputs);
  }
  if (log_new_launches_opted_in()) log_new_launch(inputs, template_args, grid);
  auto outputs =
      kernel_(inputs, output_shapes, output_dtypes, grid, threadgroup, template_args, std::nullopt, false, {});
  if (self_compiled()) prime_mlx_cache(*outputs.front().primitive_ptr(), inputs, output_dtypes, template_args);
  std::lock_guard lock(mutex_);
  launches_.emplace(std::move(key), outputs.front().primitive_ptr());
  return outputs;
}

std::vector<mx::array> CachedKernel::operator()(const KernelLaunch& launch) const {
  if (!launch.spec || launch.spec->name != spec_.name)
    throw std::invalid_argument(fmt::format("[CachedKernel] {}: a launch of another kernel ({})", spec_.name,
                                            launch.spec ? launch.spec->name : "none"));
  return (*this)(launch.inputs, launch.output_shapes, launch.output_dtypes, launch.grid, launch.threadgroup,
                 launch.template_args, std::nullopt, false, {});
}

std::shared_ptr<mx::Primitive> CachedKernel::primitive(const KernelLaunch& launch) const {
  return (*this)(launch).front().primitive_ptr();
}

void CachedKernel::prime_mlx_cache(
    const mx::Primitive& primitive, const std::vector<mx::array>& inputs, const std::vector<mx::Dtype>& output_dtypes,
    const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args) const {
  if (std::string(primitive.name()) != "CustomKernel") return;
  // The name and the source text MLX will compile the kernel from, and so its module's name.
  const auto state = static_cast<const mx::fast::CustomKernel&>(primitive).state();
  const auto& name = std::get<0>(state);
  const auto module = mlx_custom_kernel_module(name, std::get<1>(state));
  {
    std::lock_guard lock(mutex_);
    if (!primed_.insert(module).second) return;
  }
  const auto& tc = toolchain();
  std::error_code ec;
  if (std::filesystem::exists(mlx_module_path(tc.dir, module), ec)) return;  // this or an earlier process's
  std::vector<mx::Dtype> types;
  std::vector<mx::Shape> shapes;
  for (const auto& in : inputs) {
    types.push_back(in.dtype());
    shapes.push_back(in.shape());
  }
  try {
    const auto text = self_contained_source(spec_, types, shapes, output_dtypes, template_args);
    write_mlx_module(tc.dir, module, "mlx::core::cu::" + name, spec_.name,
                     tc.nvrtc->compile(text, spec_.name + ".cu", tc.options));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[mlxrt] MLXRT_CUDA_SELF_COMPILE: %s; MLX compiles %s instead\n", e.what(),
                 spec_.name.c_str());
  }
}

}  // namespace mlxrt::kernels::cuda
