// A kernel's whole program as mlxrt compiles it itself. Why and how: kernel_source.h.
#include "mlxrt/kernels/cuda/kernel_source.h"

#include <stdexcept>
#include <type_traits>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mlxrt::kernels::cuda {

namespace {

// The CUDA types, the fixed-width integers (NVRTC does not declare them; MLX's prelude brings them
// with its device utilities) and a stand-in for MLX's Shape. Less than 0.1 s of NVRTC's time.
constexpr const char* kPrelude = R"(#include <cuda_bf16.h>
#include <cuda_fp16.h>
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
// MLX's Shape (cuda::std::array<int32_t, MAX_NDIM> with MAX_NDIM 10): the same bytes by value.
struct mlxrt_shape {
  int32_t v[10];
  __device__ __forceinline__ const int32_t& operator[](int i) const { return v[i]; }
};
)";

}  // namespace

std::vector<bool> shapes_read(const KernelSpec& spec) {
  std::vector<bool> read;
  read.reserve(spec.input_names.size());
  for (const auto& name : spec.input_names) read.push_back(spec.source.find(name + "_shape") != std::string::npos);
  return read;
}

std::string cuda_type_name(mx::Dtype t) {
  switch (t.val()) {
    case mx::Dtype::Val::bool_: return "bool";
    case mx::Dtype::Val::uint8: return "uint8_t";
    case mx::Dtype::Val::uint16: return "uint16_t";
    case mx::Dtype::Val::uint32: return "uint32_t";
    case mx::Dtype::Val::uint64: return "uint64_t";
    case mx::Dtype::Val::int8: return "int8_t";
    case mx::Dtype::Val::int16: return "int16_t";
    case mx::Dtype::Val::int32: return "int32_t";
    case mx::Dtype::Val::int64: return "int64_t";
    case mx::Dtype::Val::float16: return "__half";
    case mx::Dtype::Val::bfloat16: return "__nv_bfloat16";
    case mx::Dtype::Val::float32: return "float";
    case mx::Dtype::Val::float64: return "double";
    default: break;
  }
  throw std::invalid_argument("[kernel_source] no CUDA kernel type for this dtype (complex)");
}

std::vector<KernelParameter> kernel_parameters(const KernelSpec& spec, const std::vector<mx::Dtype>& input_types,
                                               const std::vector<mx::Shape>& input_shapes,
                                               const std::vector<mx::Dtype>& output_types) {
  if (input_types.size() != spec.input_names.size() || input_shapes.size() != spec.input_names.size())
    throw std::invalid_argument(fmt::format("[kernel_source] {}: {} inputs named, {} types and {} shapes given",
                                            spec.name, spec.input_names.size(), input_types.size(),
                                            input_shapes.size()));
  if (output_types.size() != spec.output_names.size())
    throw std::invalid_argument(fmt::format("[kernel_source] {}: {} outputs named, {} types given", spec.name,
                                            spec.output_names.size(), output_types.size()));
  for (const auto& name : spec.input_names)
    if (spec.source.find(name + "_strides") != std::string::npos ||
        spec.source.find(name + "_ndim") != std::string::npos)
      throw std::invalid_argument(fmt::format("[kernel_source] {}: the body reads {}'s strides or ndim, which only "
                                              "MLX's own compile of the kernel passes",
                                              spec.name, name));
  // MLX's parameters, in MLX's order: each input, and after it its Shape where the body reads it
  // and it has dimensions, then the outputs.
  const auto read = shapes_read(spec);
  std::vector<KernelParameter> params;
  for (size_t i = 0; i < spec.input_names.size(); ++i) {
    params.push_back({fmt::format("const {}*", cuda_type_name(input_types[i])), spec.input_names[i]});
    if (read[i] && !input_shapes[i].empty()) params.push_back({"mlxrt_shape", spec.input_names[i] + "_shape", true});
  }
  for (size_t i = 0; i < spec.output_names.size(); ++i)
    params.push_back({fmt::format("{}*", cuda_type_name(output_types[i])), spec.output_names[i]});
  return params;
}

std::string kernel_function_source(const KernelSpec& spec, const std::vector<mx::Dtype>& input_types,
                                   const std::vector<mx::Shape>& input_shapes,
                                   const std::vector<mx::Dtype>& output_types,
                                   const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args) {
  // Shapes are passed by value in the parameter bank, __grid_constant__ (NVRTC's code depends on it).
  std::vector<std::string> params;
  for (const auto& p : kernel_parameters(spec, input_types, input_shapes, output_types))
    params.push_back(p.shape ? fmt::format("const __grid_constant__ {} {}", p.type, p.name)
                             : fmt::format("{} {}", p.type, p.name));
  std::string constants;
  for (const auto& [name, arg] : template_args) {
    constants += std::visit(
        [&](const auto& v) -> std::string {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>)
            return fmt::format("  constexpr bool {} = {};\n", name, v);
          else if constexpr (std::is_same_v<V, int>)
            return fmt::format("  constexpr int {} = {};\n", name, v);
          else
            return fmt::format("  using {} = {};\n", name, cuda_type_name(v));
        },
        arg);
  }
  return fmt::format("{}\nextern \"C\" __global__ void {}(\n    {}) {{\n{}\n{}\n}}\n", spec.header, spec.name,
                     fmt::join(params, ",\n    "), constants, spec.source);
}

std::string self_contained_source(const KernelSpec& spec, const std::vector<mx::Dtype>& input_types,
                                  const std::vector<mx::Shape>& input_shapes,
                                  const std::vector<mx::Dtype>& output_types,
                                  const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args) {
  return kPrelude + kernel_function_source(spec, input_types, input_shapes, output_types, template_args);
}

}  // namespace mlxrt::kernels::cuda
