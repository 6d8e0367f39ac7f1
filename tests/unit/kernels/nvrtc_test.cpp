// NVRTC's options for a device and the error when the library is not there (kernels/cuda/nvrtc.h).
// Compiling needs the library: tests/nvrtc/ (make check-cuda-kernels).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mlxrt/kernels/cuda/nvrtc.h"

namespace {

using mlxrt::kernels::cuda::device_options;

TEST(NvrtcOptions, MachineCodeForTheDeviceWithHopperFeaturesFromNine) {
  EXPECT_EQ(device_options(9, 0, "/inc"),
            (std::vector<std::string>{"--gpu-architecture=sm_90a", "--include-path=/inc"}));
  EXPECT_EQ(device_options(10, 0, "/inc")[0], "--gpu-architecture=sm_100a");
  EXPECT_EQ(device_options(8, 6, ""), (std::vector<std::string>{"--gpu-architecture=sm_86"}));
}

TEST(NvrtcLibrary, AMissingLibraryIsNamedInTheError) {
  try {
    mlxrt::kernels::cuda::Nvrtc nvrtc("/nonexistent/libnvrtc.so.13");
    FAIL() << "opened a library that is not there";
  } catch (const mlxrt::kernels::cuda::NvrtcError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libnvrtc.so.13"), std::string::npos) << e.what();
  }
}

}  // namespace
