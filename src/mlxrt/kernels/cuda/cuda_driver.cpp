// The CUDA driver, opened at run time. Why: cuda_driver.h.
#include "mlxrt/kernels/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <initializer_list>
#include <optional>
#include <vector>

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
constexpr int kAttributeCapabilityMajor = 75;      // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttributeCapabilityMinor = 76;      // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

// Device 0's attributes, in order, or nothing where the driver or any answer fails.
std::optional<std::vector<int>> device_attributes(std::initializer_list<int> which) {
  const DriverLibrary driver;
  using Init = int (*)(unsigned);
  using DeviceGet = int (*)(int*, int);
  using Attribute = int (*)(int*, int, int);
  const auto init = driver.symbol<Init>("cuInit");
  const auto device_get = driver.symbol<DeviceGet>("cuDeviceGet");
  const auto attribute = driver.symbol<Attribute>("cuDeviceGetAttribute");
  if (!init || !device_get || !attribute || init(0) != 0) return std::nullopt;
  int device = 0;
  if (device_get(&device, 0) != 0) return std::nullopt;
  std::vector<int> values;
  for (int a : which) {
    int v = 0;
    if (attribute(&v, a, device) != 0) return std::nullopt;
    values.push_back(v);
  }
  return values;
}

}  // namespace

int cuda_multiprocessor_count() {
  const auto v = device_attributes({kAttributeMultiprocessorCount});
  return v ? (*v)[0] : 0;
}

int cuda_compute_capability() {
  const auto v = device_attributes({kAttributeCapabilityMajor, kAttributeCapabilityMinor});
  return v ? (*v)[0] * 10 + (*v)[1] : 0;
}

}  // namespace mlxrt::kernels::cuda
