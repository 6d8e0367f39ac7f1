#pragma once
// Writes small GGUF files byte by byte for the tests (valid ones, and ones broken on purpose).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mlxrt::convert::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  GgufBuilder& u32(const std::string& key, uint32_t v) { return kv(key, 4, pod(v)); }
  GgufBuilder& f32(const std::string& key, float v) { return kv(key, 6, pod(v)); }
  GgufBuilder& boolean(const std::string& key, bool v) { return kv(key, 7, std::string(1, v ? 1 : 0)); }
  GgufBuilder& str(const std::string& key, const std::string& v) { return kv(key, 8, string(v)); }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& v) {
    std::string body = pod<uint32_t>(8) + pod<uint64_t>(v.size());
    for (const auto& s : v) body += string(s);
    return kv(key, 9, body);
  }
  GgufBuilder& i32s(const std::string& key, const std::vector<int32_t>& v) {
    std::string body = pod<uint32_t>(5) + pod<uint64_t>(v.size());
    for (auto x : v) body += pod(x);
    return kv(key, 9, body);
  }
  GgufBuilder& f32s(const std::string& key, const std::vector<float>& v) {
    std::string body = pod<uint32_t>(6) + pod<uint64_t>(v.size());
    for (auto x : v) body += pod(x);
    return kv(key, 9, body);
  }

  /** A tensor with explicit bytes; `offset` < 0 places it after the previous one (aligned). */
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                      std::string bytes, int64_t offset = -1) {
    uint64_t off = offset >= 0 ? static_cast<uint64_t>(offset) : (data_.size() + 31) / 32 * 32;
    if (offset < 0) data_.resize(off, '\0');
    infos_ += string(name) + pod<uint32_t>(dims.size());
    for (auto d : dims) infos_ += pod(d);
    infos_ += pod(type) + pod(off);
    if (offset < 0) data_ += bytes;
    ++tensors_;
    return *this;
  }

  std::string build() const {
    std::string out = "GGUF" + pod(version_) + pod<uint64_t>(tensors_) + pod<uint64_t>(kvs_) + kvs_bytes_ + infos_;
    out.resize((out.size() + 31) / 32 * 32, '\0');
    return out + data_;
  }

  template <typename T>
  static std::string pod(T v) {
    std::string s(sizeof(T), '\0');
    std::memcpy(s.data(), &v, sizeof(T));
    return s;
  }
  static std::string string(const std::string& s) { return pod<uint64_t>(s.size()) + s; }

 private:
  GgufBuilder& kv(const std::string& key, uint32_t type, const std::string& body) {
    kvs_bytes_ += string(key) + pod(type) + body;
    ++kvs_;
    return *this;
  }

  uint32_t version_;
  uint64_t kvs_ = 0, tensors_ = 0;
  std::string kvs_bytes_, infos_, data_;
};

}  // namespace mlxrt::convert::testing
