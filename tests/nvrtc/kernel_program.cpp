// Prints the program mlxrt compiles itself for one launch of one of its L3 CUDA kernels
// (kernels/cuda/kernel_source.h), for tools that compile it outside the binary
// (tools/cuda/sass_compare.py). Reads one JSON object on stdin:
//   {"kernel": "mlxrt_affine_qmv", "inputs": ["bf16", "u32", ...], "ndims": [2, 2, ...],
//    "outputs": ["bf16"], "template_args": [["XT", "bf16"], ["M", 1], ["TRAD", false], ...]}
// Types are nvrtc_check.py's names (bf16 f16 f32 u8 u32 u64 i32).
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/kernels/cuda/affine_mma.h"
#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/decoder_layer.h"
#include "mlxrt/kernels/cuda/fp4_qmv.h"
#include "mlxrt/kernels/cuda/fused_qmv.h"
#include "mlxrt/kernels/cuda/kernel_source.h"
#include "mlxrt/kernels/cuda/qk_rope.h"

namespace mx = mlx::core;
using namespace mlxrt::kernels::cuda;

namespace {

mx::Dtype dtype(const std::string& name) {
  static const std::map<std::string, mx::Dtype> types{
      {"bf16", mx::bfloat16}, {"f16", mx::float16}, {"f32", mx::float32}, {"u32", mx::uint32}, {"u64", mx::uint64},
      {"i32", mx::int32}, {"u8", mx::uint8}};
  auto it = types.find(name);
  if (it == types.end()) throw std::invalid_argument("unknown type " + name);
  return it->second;
}

}  // namespace

int main() {
  try {
    const auto in = nlohmann::json::parse(std::cin);
    const std::map<std::string, const KernelSpec*> specs{
        {"mlxrt_affine_qmv", &affine_qmv_spec()},       {"mlxrt_dense_mv_split", &dense_mv_split_spec()},
        {"mlxrt_rms_norm_qkv", &rms_norm_qkv_spec()},   {"mlxrt_rms_norm_swiglu", &rms_norm_swiglu_spec()},
        {"mlxrt_qmv_residual", &qmv_residual_spec()},   {"mlxrt_qk_norm_rope", &qk_norm_rope_spec()},
        {"mlxrt_decoder_layer", &decoder_layer_spec()},  {"mlxrt_affine_qmv_chunks", &affine_qmv_chunks_spec()},
        {"mlxrt_affine_mma", &affine_mma_spec()},       {"mlxrt_fp4_qmv", &fp4_qmv_spec()}};
    const auto& spec = *specs.at(in.at("kernel").get<std::string>());
    std::vector<mx::Dtype> inputs, outputs;
    std::vector<mx::Shape> shapes;
    for (const auto& t : in.at("inputs")) inputs.push_back(dtype(t.get<std::string>()));
    for (const auto& n : in.at("ndims")) shapes.emplace_back(n.get<int>(), 1);
    for (const auto& t : in.at("outputs")) outputs.push_back(dtype(t.get<std::string>()));
    std::vector<std::pair<std::string, mx::fast::TemplateArg>> targs;
    for (const auto& a : in.at("template_args")) {
      const auto name = a.at(0).get<std::string>();
      const auto& v = a.at(1);
      if (v.is_boolean()) targs.emplace_back(name, v.get<bool>());
      else if (v.is_number_integer()) targs.emplace_back(name, v.get<int>());
      else targs.emplace_back(name, dtype(v.get<std::string>()));
    }
    std::cout << self_contained_source(spec, inputs, shapes, outputs, targs);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "kernel_program: " << e.what() << "\n";
    return 2;
  }
}
