#include "mlxrt/io/tensor_slice.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "mlxrt/io/safetensors_header.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::io {

TensorLocations tensor_locations(const std::filesystem::path& dir) {
  TensorLocations out;
  for (const auto& file : find_weight_files(dir)) {
    const auto header = read_safetensors_header(file);
    for (const auto& t : header.tensors) out[t.name] = TensorLocation{file, header.data_start + t.begin};
  }
  return out;
}

namespace {

/** An open file, closed on scope exit. */
class Fd {
 public:
  explicit Fd(const std::filesystem::path& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void read_exactly(int fd, char* into, size_t n, uint64_t at, const std::filesystem::path& file) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, into, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw WeightsError(file.string() + ": cannot read " + std::to_string(n) + " bytes at offset " + std::to_string(at) +
                         (got < 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string(" (the file ends)")));
    into += got, n -= static_cast<size_t>(got), at += static_cast<uint64_t>(got);
  }
}

}  // namespace

mx::array read_tensor_slice(const TensorLocation& at, const mx::Shape& shape, mx::Dtype dtype, int axis, int start,
                            int stop) {
  const int ax = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
  // The tensor as [outer, shape[ax], inner]: the slice is `outer` runs of (stop - start) * inner elements.
  uint64_t outer = 1, inner = 1;
  for (int i = 0; i < ax; ++i) outer *= static_cast<uint64_t>(shape[i]);
  for (size_t i = ax + 1; i < shape.size(); ++i) inner *= static_cast<uint64_t>(shape[i]);
  const uint64_t item = dtype.size();
  const uint64_t run = static_cast<uint64_t>(stop - start) * inner * item;
  const uint64_t stride = static_cast<uint64_t>(shape[ax]) * inner * item;
  mx::Shape out_shape = shape;
  out_shape[ax] = stop - start;
  char* buffer = static_cast<char*>(std::malloc(std::max<uint64_t>(outer * run, 1)));
  if (!buffer) throw WeightsError(at.file.string() + ": out of memory reading a tensor slice");
  try {
    Fd fd(at.file);
    if (fd.get() < 0) throw WeightsError(at.file.string() + ": cannot open (" + std::strerror(errno) + ")");
    const uint64_t first = at.offset + static_cast<uint64_t>(start) * inner * item;
    if (start == 0 && stop == shape[ax]) {
      read_exactly(fd.get(), buffer, outer * run, at.offset, at.file);
    } else {
      for (uint64_t o = 0; o < outer; ++o) read_exactly(fd.get(), buffer + o * run, run, first + o * stride, at.file);
    }
  } catch (...) {
    std::free(buffer);
    throw;
  }
  return mx::array(buffer, out_shape, dtype, [](void* p) { std::free(p); });
}

}  // namespace mlxrt::io
