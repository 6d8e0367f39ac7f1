#pragma once
/** NVRTC, opened at run time, for the kernels mlxrt compiles itself (kernels/cuda/kernel_source.h).
 *
 * Why not leave every compile to MLX (mx::fast::cuda_kernel): MLX puts its own prelude in front of
 * each custom kernel (its device utilities and cooperative groups), and parsing that prelude is
 * about 1.05 s of the 1.1-1.3 s NVRTC spends on each of our L3 kernels (measured with NVRTC 13.0 on
 * this project's CPU machine: tools/cuda/nvrtc_check.py's sources, sm_90a). MLX also keeps custom
 * kernels in memory only, so every process paid that again, for six to eight kernels, at its first
 * L3 decoding step. Our kernels need none of the prelude: compiled from their own text they take
 * 0.1-0.3 s each (mean 0.17 s over tests/nvrtc's 13 programs).
 *
 * The library is not linked: the binary is built against MLX's CPU wheel and runs on a CUDA one,
 * whose libmlx already loads NVRTC. The constructor takes the copy the process has loaded, else loads it by
 * name (or from MLXRT_NVRTC_LIBRARY, a path). */
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlxrt::kernels::cuda {

/** NVRTC could not be opened, or refused a program (what() holds its log). */
class NvrtcError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Nvrtc {
 public:
  /** `library`: a path or a soname; empty: MLXRT_NVRTC_LIBRARY, else the loaded or loadable
   * libnvrtc.so.13 / .12. Throws NvrtcError naming what it tried. */
  explicit Nvrtc(const std::string& library = "");
  ~Nvrtc();
  Nvrtc(const Nvrtc&) = delete;
  Nvrtc& operator=(const Nvrtc&) = delete;

  /** The compiled image of `source` (a cubin for an sm_ architecture, PTX text for compute_),
   * `program_name` naming it in NVRTC's messages. Throws NvrtcError with NVRTC's log. */
  std::string compile(const std::string& source, const std::string& program_name,
                      const std::vector<std::string>& options) const;

  int major() const { return major_; }
  int minor() const { return minor_; }
  /** The file the library was loaded from (dladdr), for messages and for finding its headers. */
  const std::string& path() const { return path_; }

 private:
  struct Api;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  int major_ = 0, minor_ = 0;
  std::string path_;
};

/** NVRTC's options for a device of compute capability major.minor, as MLX's own JIT compiles:
 * straight to the device's machine code (sm_XY, with the `a` features from 9.0), and the CUDA
 * headers' folder, where cuda_bf16.h and cuda_fp16.h are. */
std::vector<std::string> device_options(int cc_major, int cc_minor, const std::string& cuda_include_dir);

/** The folder with the CUDA runtime headers: MLXRT_CUDA_INCLUDE_DIR, else the NVIDIA wheel's
 * (nvidia/cu<N>/include beside MLX's package, found from where libmlx or NVRTC was loaded), else
 * CUDA_HOME / CUDA_PATH / /usr/local/cuda's include; "" when none has cuda_bf16.h. */
std::string find_cuda_include_dir(const Nvrtc& nvrtc);

}  // namespace mlxrt::kernels::cuda
