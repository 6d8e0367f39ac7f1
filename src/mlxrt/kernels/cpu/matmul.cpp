#include "mlxrt/kernels/cpu/quantized_matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <mlx/allocator.h>
#include <mlx/backend/cpu/encoder.h>
#include <mlx/ops.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"
#include "mlxrt/kernels/cpu/cpu_workers.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::kernels::cpu {

namespace {

bool cpu_has_avx2() {
#if defined(MLXRT_CPU_X86_KERNELS)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(MLXRT_CPU_X86_KERNELS)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

// A row-contiguous copy of an input MLX gave us strided (MLX's kernel copies such inputs too).
std::vector<char> dense_copy(const mx::array& a) {
  std::vector<char> out(a.nbytes());
  const size_t item = a.itemsize();
  const char* src = static_cast<const char*>(a.data<void>());
  const auto& shape = a.shape();
  const auto& strides = a.strides();
  std::vector<int> index(shape.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    long long offset = 0;
    for (size_t d = 0; d < shape.size(); ++d) offset += static_cast<long long>(index[d]) * strides[d];
    std::memcpy(out.data() + i * item, src + offset * static_cast<long long>(item), item);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < shape[static_cast<size_t>(d)]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
  return out;
}

class AffineQuantizedMatmul : public mx::UnaryPrimitive {
 public:
  AffineQuantizedMatmul(mx::Stream stream, std::shared_ptr<const CpuKernels> kernels, int group_size, int bits)
      : mx::UnaryPrimitive(stream), kernels_(std::move(kernels)), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    if (out.size() == 0) return;
    auto& encoder = mx::cpu::get_command_encoder(stream());
    encoder.dispatch([out = mx::array::unsafe_weak_copy(out), x = mx::array::unsafe_weak_copy(inputs[0]),
                      w = mx::array::unsafe_weak_copy(inputs[1]), scales = mx::array::unsafe_weak_copy(inputs[2]),
                      biases = mx::array::unsafe_weak_copy(inputs[3]), kernels = kernels_, group_size = group_size_,
                      bits = bits_]() mutable { compute(*kernels, out, x, w, scales, biases, group_size, bits); });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[AffineQuantizedMatmul] runs on the CPU only");
  }

  const char* name() const override { return "AffineQuantizedMatmul"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const AffineQuantizedMatmul*>(&other);
    return o && o->group_size_ == group_size_ && o->bits_ == bits_ && o->kernels_ == kernels_;
  }

 private:
  static void compute(const CpuKernels& kernels, mx::array& out, const mx::array& x, const mx::array& w,
                      const mx::array& scales, const mx::array& biases, int group_size, int bits) {
    std::vector<char> copies[4];
    auto dense = [&copies](int i, const mx::array& a) -> const void* {
      if (a.flags().row_contiguous) return a.data<void>();
      copies[i] = dense_copy(a);
      return copies[i].data();
    };
    AffineQmmArgs args;
    args.out = out.data<void>();
    args.x = dense(0, x);
    args.w = static_cast<const std::uint32_t*>(dense(1, w));
    args.scales = dense(2, scales);
    args.biases = dense(3, biases);
    args.k = x.shape(-1);
    args.rows = static_cast<int>(x.size() / static_cast<size_t>(args.k));
    args.n = out.shape(-1);
    args.bits = bits;
    args.group_size = group_size;
    args.elem = out.dtype() == mx::bfloat16 ? QmmElem::bf16 : out.dtype() == mx::float16 ? QmmElem::f16 : QmmElem::f32;
    const int column_units = (args.n + kColumnsPerUnit - 1) / kColumnsPerUnit;
    const int row_units = (args.rows + kRowsPerUnit - 1) / kRowsPerUnit;
    const bool avx512 = kernels.avx512();
    kernels.workers().run(column_units * row_units, scratch_floats(args), [&](float* scratch, int begin, int end) {
#if defined(MLXRT_CPU_X86_KERNELS)
      if (avx512)
        affine_qmm_units_avx512(args, begin, end, scratch);
      else
        affine_qmm_units_avx2(args, begin, end, scratch);
#else
      (void)avx512, (void)scratch, (void)begin, (void)end;
#endif
    });
  }

  std::shared_ptr<const CpuKernels> kernels_;
  int group_size_;
  int bits_;
};

int parse_threads(const char* v) {
  if (!v || !*v) return 0;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 1024)
    throw UsageError(std::string("MLXRT_CPU_THREADS must be a whole number from 1 to 1024, got '") + v + "'");
  return static_cast<int>(n);
}

}  // namespace

CpuKernels::CpuKernels(bool avx512, int threads) : avx512_(avx512), workers_(std::make_unique<CpuWorkers>(threads)) {}
CpuKernels::~CpuKernels() = default;
int CpuKernels::threads() const { return workers_->threads(); }

std::shared_ptr<CpuKernels> CpuKernels::create(int threads, bool allow_avx512) {
  if (!cpu_has_avx2()) return nullptr;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::shared_ptr<CpuKernels>(new CpuKernels(allow_avx512 && cpu_has_avx512(), threads));
}

std::shared_ptr<CpuKernels> CpuKernels::from_environment() {
  const char* choice = std::getenv("MLXRT_CPU_KERNELS");
  if (choice && std::string(choice) == "mlx") return nullptr;
  if (choice && *choice && std::string(choice) != "native")
    throw UsageError(std::string("MLXRT_CPU_KERNELS must be 'native' or 'mlx', got '") + choice + "'");
  return create(parse_threads(std::getenv("MLXRT_CPU_THREADS")));
}

mx::array quantized_matmul(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, const mx::array& w,
                           const mx::array& scales, const std::optional<mx::array>& biases, int group_size, int bits,
                           const std::string& mode) {
  // MLX's own node first: its checks, its type promotion and its inputs (x, scales and biases cast
  // to the result type) are what ours computes from.
  auto y = mx::quantized_matmul(x, w, scales, biases, true, group_size, bits, mode);
  if (!kernels || mode != "affine" || !biases || w.ndim() != 2) return y;
  if (bits != 2 && bits != 4 && bits != 8) return y;
  if (group_size != 32 && group_size != 64 && group_size != 128) return y;  // MLX's CPU kernel's set
  if (y.dtype() != mx::float32 && y.dtype() != mx::bfloat16 && y.dtype() != mx::float16) return y;
  const mx::Stream stream = y.primitive().stream();
  if (stream.device != mx::Device::cpu) return y;
  return mx::array(y.shape(), y.dtype(), std::make_shared<AffineQuantizedMatmul>(stream, kernels, group_size, bits),
                   y.inputs());
}

}  // namespace mlxrt::kernels::cpu
