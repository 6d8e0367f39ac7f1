#include "mlxrt/kernels/cpu/operand.h"

#include <cstring>

namespace mlxrt::kernels::cpu::detail {

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

}  // namespace mlxrt::kernels::cpu::detail
