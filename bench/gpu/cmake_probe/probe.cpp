// Prints the default device and a small result computed on it.
#include <iostream>

#include <mlx/mlx.h>

namespace mx = mlx::core;

int main() {
  auto a = mx::arange(1, 1025, mx::int32);
  auto total = mx::sum(mx::multiply(a, a));
  std::cout << "device " << mx::default_device() << " gpu_available " << mx::is_available(mx::Device::gpu)
            << " sum_of_squares " << total.item<int32_t>() << "\n";
  return total.item<int32_t>() == 358438400 ? 0 : 1;
}
