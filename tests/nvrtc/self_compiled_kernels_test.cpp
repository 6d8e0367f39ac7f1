// mlxrt's L3 CUDA kernels compiled the way MLXRT_CUDA_SELF_COMPILE=1 compiles them at run time
// (kernels/cuda/cached_kernel.h): the specs' programs (kernel_source.h) through our NVRTC wrapper
// (nvrtc.h), for an H200 (sm_90a), at template arguments the launches use (Qwen3-0.6B and 8B
// shapes, each float type, 4 and 8 bits, groups of 32-128, 1-8 rows). NVRTC needs no GPU, so this
// runs on a CPU machine: `make check-cuda-kernels` builds it and points MLXRT_NVRTC_LIBRARY at the
// NVRTC wheel it downloads (not part of `make test`). Whether the kernels compute the right
// numbers when MLX launches them is tests/gpu/'s job, on a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mlxrt/kernels/cuda/affine_mma.h"
#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/fp4_qmv.h"
#include "mlxrt/kernels/cuda/fused_qmv.h"
#include "mlxrt/kernels/cuda/kernel_source.h"
#include "mlxrt/kernels/cuda/nvrtc.h"
#include "mlxrt/kernels/cuda/qk_rope.h"

namespace mx = mlx::core;
using namespace mlxrt::kernels::cuda;

namespace {

using TemplateArgs = std::vector<std::pair<std::string, mx::fast::TemplateArg>>;

struct Launch {
  const KernelSpec* spec;
  std::vector<mx::Dtype> inputs;
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> outputs;
  TemplateArgs targs;
};

const Nvrtc& nvrtc() {
  static const Nvrtc lib;  // MLXRT_NVRTC_LIBRARY, as make check-cuda-kernels sets it
  return lib;
}

std::vector<std::string> h200_options() { return device_options(9, 0, find_cuda_include_dir(nvrtc())); }

int eps_bits(float eps) { return std::bit_cast<int>(eps); }

// An affine product's launch: x [M, K], w [N, K * bits / 32] (x's type where bits is 0: dense).
Launch qmv(mx::Dtype xt, mx::Dtype st, int bits, int gs, int m, int r, int n, int k, int depth = 2) {
  const auto ot = mx::promote_types(xt, st);
  const auto wt = bits ? mx::uint32 : xt;
  const int cols = bits ? k * bits / 32 : k;
  return {&affine_qmv_spec(),
          {xt, wt, bits ? st : xt, bits ? st : xt},
          {{m, k}, {n, cols}, {n, bits ? k / gs : cols}, {n, bits ? k / gs : cols}},
          {ot},
          {{"XT", xt}, {"ST", bits ? st : xt}, {"OT", ot}, {"M", m}, {"R", r}, {"BITS", bits}, {"GS", gs},
           {"DEPTH", depth}}};
}

// The fused products' launches (fused_qmv.cpp): the normalised q/k/v, gate/up + SwiGLU, a product
// plus the residual.
std::vector<Launch> fused(mx::Dtype t, int bits, int gs, int m, int k, int nq, int nkv, int ffn) {
  const auto wt = bits ? mx::uint32 : t;
  const int cols = bits ? k * bits / 32 : k, groups = bits ? k / gs : k;
  const TemplateArgs common{{"XT", t}, {"ST", t},     {"OT", t},          {"M", m},   {"R", 2},
                            {"BITS", bits}, {"GS", gs}, {"K", k}, {"COLS", cols}, {"SK", m * k}};
  auto with_eps = common;
  with_eps.emplace_back("EPS_BITS", eps_bits(1e-6f));
  auto swiglu = with_eps;  // gate and up in one pass, 4 steps of loads in flight
  swiglu.emplace_back("PAIRED", true);
  swiglu.emplace_back("DEPTH", 4);
  with_eps.emplace_back("DEPTH", 2);
  std::vector<Launch> out;
  out.push_back({&rms_norm_qkv_spec(),
                 {t, t, wt, t, t, wt, t, t, wt, t, t},
                 {{m, k}, {k}, {nq, cols}, {nq, groups}, {nq, groups}, {nkv, cols}, {nkv, groups}, {nkv, groups},
                  {nkv, cols}, {nkv, groups}, {nkv, groups}},
                 {t, t, t},
                 with_eps});
  out.push_back({&rms_norm_swiglu_spec(),
                 {t, t, wt, t, t, wt, t, t},
                 {{m, k}, {k}, {ffn, cols}, {ffn, groups}, {ffn, groups}, {ffn, cols}, {ffn, groups}, {ffn, groups}},
                 {t},
                 swiglu});
  const int dcols = bits ? ffn * bits / 32 : ffn, dgroups = bits ? ffn / gs : ffn;
  out.push_back({&qmv_residual_spec(),
                 {t, wt, t, t, t},
                 {{m, ffn}, {k, dcols}, {k, dgroups}, {k, dgroups}, {m, k}},
                 {t},
                 {{"XT", t}, {"ST", t}, {"OT", t}, {"M", m}, {"R", 2}, {"BITS", bits}, {"GS", gs}, {"DEPTH", 3}}});
  return out;
}

Launch qk_rope(mx::Dtype t, int rows, int h, int hk, int d, bool norm, bool freqs) {
  return {&qk_norm_rope_spec(),
          {t, t, t, t, mx::int32, freqs ? mx::float32 : mx::int32},
          {{1, rows, h * d}, {1, rows, hk * d}, {d}, {d}, {1}, {freqs ? d / 2 : 1}},
          {t, t},
          {{"QT", t},
           {"M", rows},
           {"L", rows},
           {"H", h},
           {"HK", hk},
           {"D", d},
           {"ROT", d},
           {"TRAD", false},
           {"FREQS", freqs},
           {"NORM", norm},
           {"PER_ROW", false},
           {"EPS_Q_BITS", norm ? eps_bits(1e-6f) : 0},
           {"EPS_K_BITS", norm ? eps_bits(1e-6f) : 0},
           {"LOG2_BASE_BITS", eps_bits(19.93156857f)},
           {"SCALE_BITS", eps_bits(1.0f)}}};
}

TEST(SelfCompiledKernels, EveryL3KernelCompilesForTheH200) {
  const auto options = h200_options();
  ASSERT_EQ(options.size(), 2u) << "no CUDA headers found beside " << nvrtc().path();
  std::vector<Launch> launches{
      qmv(mx::bfloat16, mx::bfloat16, 4, 64, 1, 4, 12288, 4096),  // Qwen3-8B gate/up, one row
      qmv(mx::float16, mx::float16, 8, 32, 3, 2, 4096, 4096, 4),
      qmv(mx::float32, mx::bfloat16, 4, 128, 8, 1, 2048, 1024),
      qmv(mx::bfloat16, mx::bfloat16, 0, 0, 1, 4, 151936, 1024),  // a dense head (MLXRT_CUDA_L3_DENSE)
      qk_rope(mx::bfloat16, 1, 32, 8, 128, true, false),          // Qwen3-8B
      qk_rope(mx::float16, 4, 16, 8, 128, false, true),
  };
  for (auto& l : fused(mx::bfloat16, 4, 64, 1, 4096, 4096, 1024, 12288)) launches.push_back(std::move(l));
  for (auto& l : fused(mx::float32, 8, 32, 4, 1024, 2048, 1024, 3072)) launches.push_back(std::move(l));
  // A batched decoding step's 32 rows in four chunks of 8 (affine_qmv_chunks).
  auto chunks = qmv(mx::bfloat16, mx::bfloat16, 4, 64, 8, 4, 12288, 4096);
  chunks.spec = &affine_qmv_chunks_spec();
  chunks.shapes[0] = {32, 4096};
  chunks.targs.emplace_back("CHUNKS", 4);
  launches.push_back(std::move(chunks));
  // A batched decoding step's 32 rows on the tensor cores (affine_mma: four tiles of 8 rows).
  launches.push_back({&affine_mma_spec(),
                      {mx::bfloat16, mx::uint32, mx::bfloat16, mx::bfloat16},
                      {{32, 4096}, {12288, 512}, {12288, 64}, {12288, 64}},
                      {mx::bfloat16},
                      {{"XT", mx::bfloat16}, {"ST", mx::bfloat16}, {"OT", mx::bfloat16}, {"GS", 64}, {"MT", 4},
                       {"WARPS", 4}, {"AHEAD", 2}}});
  // The 4-bit float modes' product (fp4_qmv): mxfp4 at one row, nvfp4 at three.
  launches.push_back({&fp4_qmv_spec(),
                      {mx::bfloat16, mx::uint32, mx::uint8},
                      {{1, 4096}, {12288, 512}, {12288, 128}},
                      {mx::bfloat16},
                      {{"OT", mx::bfloat16}, {"M", 1}, {"R", 4}, {"GS", 32}, {"E8", 1}}});
  launches.push_back({&fp4_qmv_spec(),
                      {mx::float16, mx::uint32, mx::uint8},
                      {{3, 4096}, {4096, 512}, {4096, 256}},
                      {mx::float16},
                      {{"OT", mx::float16}, {"M", 3}, {"R", 2}, {"GS", 16}, {"E8", 0}}});
  // The split-K dense product (affine_qmv.cpp's dense_mv with split_k).
  launches.push_back({&dense_mv_split_spec(),
                      {mx::bfloat16, mx::bfloat16},
                      {{2, 4096}, {4096, 4096}},
                      {mx::bfloat16},
                      {{"OT", mx::bfloat16}, {"M", 2}, {"R", 2}}});
  double seconds = 0;
  for (const auto& l : launches) {
    const auto text = self_contained_source(*l.spec, l.inputs, l.shapes, l.outputs, l.targs);
    const auto t0 = std::chrono::steady_clock::now();
    std::string image;
    try {
      image = nvrtc().compile(text, l.spec->name + ".cu", options);
    } catch (const NvrtcError& e) {
      ADD_FAILURE() << e.what() << "\n--- program ---\n" << text;
      continue;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += s;
    // A cubin: an ELF image (MLX hands it to cuModuleLoadDataEx as it is).
    ASSERT_GE(image.size(), 4u);
    EXPECT_EQ(image.substr(0, 4), std::string("\x7f" "ELF")) << l.spec->name;
    EXPECT_NE(image.find(l.spec->name), std::string::npos) << l.spec->name << ": the extern \"C\" symbol";
    std::printf("  %-24s %6zu bytes  %.3f s\n", l.spec->name.c_str(), image.size(), s);
  }
  std::printf("  %zu programs, %.2f s (mean %.3f s)\n", launches.size(), seconds, seconds / launches.size());
}

TEST(SelfCompiledKernels, NvrtcsLogReachesTheError) {
  try {
    nvrtc().compile("extern \"C\" __global__ void broken(float* y) { y[0] = undeclared_name; }", "broken.cu",
                    h200_options());
    FAIL() << "the program does not compile";
  } catch (const NvrtcError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("broken.cu"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_name"), std::string::npos) << what;
  }
}

TEST(SelfCompiledKernels, PtxForAComputeArchitecture) {
  auto options = h200_options();
  options[0] = "--gpu-architecture=compute_90";
  const auto ptx = nvrtc().compile("extern \"C\" __global__ void k(float* y) { y[0] = 1.0f; }", "k.cu", options);
  EXPECT_NE(ptx.find(".entry k"), std::string::npos);
}

}  // namespace
