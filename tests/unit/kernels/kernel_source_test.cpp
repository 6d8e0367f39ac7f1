// The program mlxrt compiles itself for one of its CUDA kernels (kernels/cuda/kernel_source.h): the
// parameters as MLX's own kernel has them (each input, its Shape where read, the outputs), the
// template arguments as MLX's cuda_kernel writes them, the body and device code as given; and clear
// errors for what it cannot write. No GPU needed (compiling the programs with
// NVRTC is tests/nvrtc/, run by `make check-cuda-kernels`).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <variant>

#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/fp4_qmv.h"
#include "mlxrt/kernels/cuda/fused_qmv.h"
#include "mlxrt/kernels/cuda/kernel_source.h"
#include "mlxrt/kernels/cuda/qk_rope.h"

namespace mx = mlx::core;
using mlxrt::kernels::cuda::KernelSpec;

namespace {

const KernelSpec kScale{"mlxrt_test_scale",
                        {"inp", "w", "bias"},
                        {"out"},
                        "  out[0] = static_cast<T>(inp[0] * S) + w[w_shape[1]];\n",
                        "// device code\n"};

TEST(KernelSource, ShapesReadAreThoseTheBodyNames) {
  EXPECT_EQ(mlxrt::kernels::cuda::shapes_read(kScale), (std::vector<bool>{false, true, false}));
}

TEST(KernelSource, ProgramHasMlxsParameterOrderAndTemplateLines) {
  const auto text = mlxrt::kernels::cuda::self_contained_source(
      kScale, {mx::float32, mx::uint32, mx::bfloat16}, {{4}, {3, 8}, {}}, {mx::float16},
      {{"T", mx::float16}, {"S", 3}, {"TRAD", true}, {"OFF", false}});
  const std::string expected_kernel =
      "// device code\n"
      "\n"
      "extern \"C\" __global__ void mlxrt_test_scale(\n"
      "    const float* inp,\n"
      "    const uint32_t* w,\n"
      "    const __grid_constant__ mlxrt_shape w_shape,\n"
      "    const __nv_bfloat16* bias,\n"
      "    __half* out) {\n"
      "  using T = __half;\n"
      "  constexpr int S = 3;\n"
      "  constexpr bool TRAD = true;\n"
      "  constexpr bool OFF = false;\n"
      "\n"
      "  out[0] = static_cast<T>(inp[0] * S) + w[w_shape[1]];\n"
      "\n"
      "}\n";
  ASSERT_GE(text.size(), expected_kernel.size());
  EXPECT_EQ(text.substr(text.size() - expected_kernel.size()), expected_kernel);
  // The prelude: the CUDA types' headers and the fixed-width integers, nothing of MLX's.
  EXPECT_EQ(text.rfind("#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n", 0), 0u);
  EXPECT_NE(text.find("typedef unsigned int uint32_t;"), std::string::npos);
  // MLX's Shape: ten int32 by value.
  EXPECT_NE(text.find("struct mlxrt_shape {\n  int32_t v[10];"), std::string::npos);
  EXPECT_EQ(text.find("mlx/backend"), std::string::npos);
  EXPECT_EQ(text.find("cooperative_groups"), std::string::npos);
}

TEST(KernelSource, AShapeOnlyWhereTheInputHasDimensions) {
  // MLX passes no Shape for an input without dimensions, so neither does the program.
  const auto text = mlxrt::kernels::cuda::self_contained_source(kScale, {mx::float32, mx::uint32, mx::float32},
                                                                {{4}, {}, {}}, {mx::float32}, {});
  EXPECT_EQ(text.find("w_shape,"), std::string::npos) << text;
  EXPECT_NE(text.find("    const uint32_t* w,\n    const float* bias,"), std::string::npos) << text;
}

TEST(KernelSource, StridesAndNdimAreMlxsOnly) {
  const KernelSpec spec{"mlxrt_test_strided", {"x"}, {"y"}, "  y[0] = x[x_strides[0]];\n", ""};
  EXPECT_THROW(mlxrt::kernels::cuda::self_contained_source(spec, {mx::float32}, {{2}}, {mx::float32}, {}),
               std::invalid_argument);
}

TEST(KernelSource, MismatchedListsAndComplexTypesAreRefused) {
  try {
    mlxrt::kernels::cuda::self_contained_source(kScale, {mx::float32}, {{4}}, {mx::float32}, {});
    FAIL() << "three inputs named, one given";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mlxrt_test_scale: 3 inputs named, 1 types"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mlxrt::kernels::cuda::self_contained_source(kScale, {mx::float32, mx::uint32, mx::float32},
                                                           {{4}, {3, 8}, {}}, {}, {}),
               std::invalid_argument);
  EXPECT_THROW(mlxrt::kernels::cuda::cuda_type_name(mx::complex64), std::invalid_argument);
}

// The L3 kernels' specs name what their launches pass, and their bodies' shape reads are the
// weights' (the products' N and K).
TEST(KernelSource, L3SpecsReadTheWeightsShapes) {
  using namespace mlxrt::kernels::cuda;
  EXPECT_EQ(shapes_read(affine_qmv_spec()), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(shapes_read(qmv_residual_spec()), (std::vector<bool>{false, true, false, false, false}));
  EXPECT_EQ(shapes_read(fp4_qmv_spec()), (std::vector<bool>{false, true, false}));
  const auto qkv = shapes_read(rms_norm_qkv_spec());
  EXPECT_TRUE(qkv[2] && qkv[5] && qkv[8]);  // wq, wk, wv
  EXPECT_FALSE(qkv[0] || qkv[1]);
  for (const auto* spec : {&affine_qmv_spec(), &dense_mv_split_spec(), &rms_norm_qkv_spec(), &rms_norm_swiglu_spec(),
                           &qmv_residual_spec(), &qk_norm_rope_spec(), &fp4_qmv_spec()})
    EXPECT_TRUE(spec->self_compile) << spec->name;
}

}  // namespace
