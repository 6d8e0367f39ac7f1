#pragma once
/** A read-only memory map of a whole file (RAII). */
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace mlxrt::convert {

class MappedFile {
 public:
  /** Maps `path`; WeightsError naming the file when it cannot be opened or mapped. */
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace mlxrt::convert
