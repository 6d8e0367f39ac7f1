// The CUDA driver, opened at run time. Why: cuda_driver.h.
#include "mlxrt/kernels/cuda/cuda_driver.h"

#include <dlfcn.h>

namespace mlxrt::kernels::cuda {

namespace {

// The driver's handle, closed when done (dlclose of a library MLX holds only drops our reference).
class DriverLibrary {
 public:
  DriverLibrary() {
    handle_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!handle_) handle_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  }
  ~DriverLibrary() {
    if (handle_) dlclose(handle_);
  }
  DriverLibrary(const DriverLibrary&) = delete;
  DriverLibrary& operator=(const DriverLibrary&) = delete;

  template <typename F>
  F symbol(const char* name) const {
    return handle_ ? reinterpret_cast<F>(dlsym(handle_, name)) : nullptr;
  }

 private:
  void* handle_ = nullptr;
};

constexpr int kAttributeMultiprocessorCount = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT

}  // namespace

int cuda_multiprocessor_count() {
  const DriverLibrary driver;
  using Init = int (*)(unsigned);
  using DeviceGet = int (*)(int*, int);
  using Attribute = int (*)(int*, int, int);
  const auto init = driver.symbol<Init>("cuInit");
  const auto device_get = driver.symbol<DeviceGet>("cuDeviceGet");
  const auto attribute = driver.symbol<Attribute>("cuDeviceGetAttribute");
  if (!init || !device_get || !attribute || init(0) != 0) return 0;
  int device = 0, count = 0;
  if (device_get(&device, 0) != 0 || attribute(&count, kAttributeMultiprocessorCount, device) != 0) return 0;
  return count;
}

}  // namespace mlxrt::kernels::cuda
