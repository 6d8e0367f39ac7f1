#include "mlxrt/convert/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id) {
  // Block geometry of every ggml type a GGUF file may hold (ggml's type traits).
  static const std::map<uint32_t, GgmlTypeTraits> table = {
      {0, {"F32", 1, 4}},          {1, {"F16", 1, 2}},          {2, {"Q4_0", 32, 18}},
      {3, {"Q4_1", 32, 20}},       {6, {"Q5_0", 32, 22}},       {7, {"Q5_1", 32, 24}},
      {8, {"Q8_0", 32, 34}},       {9, {"Q8_1", 32, 36}},       {10, {"Q2_K", 256, 84}},
      {11, {"Q3_K", 256, 110}},    {12, {"Q4_K", 256, 144}},    {13, {"Q5_K", 256, 176}},
      {14, {"Q6_K", 256, 210}},    {15, {"Q8_K", 256, 292}},    {16, {"IQ2_XXS", 256, 66}},
      {17, {"IQ2_XS", 256, 74}},   {18, {"IQ3_XXS", 256, 98}},  {19, {"IQ1_S", 256, 50}},
      {20, {"IQ4_NL", 32, 18}},    {21, {"IQ3_S", 256, 110}},   {22, {"IQ2_S", 256, 82}},
      {23, {"IQ4_XS", 256, 136}},  {24, {"I8", 1, 1}},          {25, {"I16", 1, 2}},
      {26, {"I32", 1, 4}},         {27, {"I64", 1, 8}},         {28, {"F64", 1, 8}},
      {29, {"IQ1_M", 256, 56}},    {30, {"BF16", 1, 2}},        {34, {"TQ1_0", 256, 54}},
      {35, {"TQ2_0", 256, 66}},    {39, {"MXFP4", 32, 17}},     {40, {"NVFP4", 64, 36}},
      {41, {"Q1_0", 128, 18}},
  };
  auto it = table.find(type_id);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

std::string gguf_value_type_name(GgufValueType type) {
  static const char* names[] = {"uint8", "int8",  "uint16", "int16",  "uint32", "int32", "float32",
                                "bool",  "string", "array", "uint64", "int64",  "float64"};
  auto i = static_cast<uint32_t>(type);
  return i < std::size(names) ? names[i] : "type " + std::to_string(i);
}

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw WeightsError(source + ": invalid GGUF file: " + what);
}

/** Bounds-checked little-endian reads; every failure names what was being read and where. */
class Cursor {
 public:
  Cursor(std::string_view bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail(source_, "truncated " + what + ": needs " + std::to_string(n) + " bytes at offset " +
                        std::to_string(pos_) + ", only " + std::to_string(remaining()) + " left");
  }

  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));  // GGUF is little-endian, like our hosts
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what) {
    auto n = read<uint64_t>(what + " length");
    if (n > kMaxGgufArray) fail(source_, what + " has an implausible length " + std::to_string(n));
    need(n, what);
    std::string s(bytes_.substr(pos_, n));
    pos_ += n;
    return s;
  }

  void skip(uint64_t n, const std::string& what) {
    need(n, what);
    pos_ += n;
  }

 private:
  std::string_view bytes_;
  const std::string& source_;
  size_t pos_ = 0;
};

size_t fixed_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::uint8: case GgufValueType::int8: case GgufValueType::boolean: return 1;
    case GgufValueType::uint16: case GgufValueType::int16: return 2;
    case GgufValueType::uint32: case GgufValueType::int32: case GgufValueType::float32: return 4;
    case GgufValueType::uint64: case GgufValueType::int64: case GgufValueType::float64: return 8;
    default: return 0;
  }
}

GgufValueType read_value_type(Cursor& c, const std::string& what, const std::string& source) {
  auto t = c.read<uint32_t>(what + " type");
  if (t > static_cast<uint32_t>(GgufValueType::float64))
    fail(source, what + " has unknown value type " + std::to_string(t));
  return static_cast<GgufValueType>(t);
}

/** Reads one fixed-size scalar into the widened fields of `v`. */
void read_scalar(Cursor& c, GgufValueType t, GgufValue& v, const std::string& what) {
  switch (t) {
    case GgufValueType::uint8: v.unsigned_integer = c.read<uint8_t>(what); break;
    case GgufValueType::uint16: v.unsigned_integer = c.read<uint16_t>(what); break;
    case GgufValueType::uint32: v.unsigned_integer = c.read<uint32_t>(what); break;
    case GgufValueType::uint64: v.unsigned_integer = c.read<uint64_t>(what); break;
    case GgufValueType::int8: v.integer = c.read<int8_t>(what); break;
    case GgufValueType::int16: v.integer = c.read<int16_t>(what); break;
    case GgufValueType::int32: v.integer = c.read<int32_t>(what); break;
    case GgufValueType::int64: v.integer = c.read<int64_t>(what); break;
    case GgufValueType::boolean: v.integer = c.read<uint8_t>(what) != 0; break;
    case GgufValueType::float32: v.real = c.read<float>(what); break;
    case GgufValueType::float64: v.real = c.read<double>(what); break;
    default: break;
  }
}

void read_value(Cursor& c, GgufValueType t, GgufValue& v, const std::string& what,
                const std::string& source, int depth);

void read_array(Cursor& c, GgufValue& v, const std::string& what, const std::string& source,
                int depth) {
  if (depth > 3) fail(source, what + ": arrays nested too deeply");
  v.element_type = read_value_type(c, what + " element", source);
  v.array_size = c.read<uint64_t>(what + " array length");
  // Every element takes at least one byte (a string at least its 8-byte length), so a count
  // larger than the bytes left is a lie; checking first keeps allocation bounded.
  size_t min_size = v.element_type == GgufValueType::string ? 8
                    : v.element_type == GgufValueType::array ? 12
                                                              : fixed_size(v.element_type);
  if (v.array_size > kMaxGgufArray || v.array_size * min_size > c.remaining())
    fail(source, "truncated " + what + ": an array of " + std::to_string(v.array_size) + " " +
                     gguf_value_type_name(v.element_type) + " elements does not fit in the " +
                     std::to_string(c.remaining()) + " bytes left");
  for (uint64_t i = 0; i < v.array_size; ++i) {
    GgufValue e;
    e.type = v.element_type;
    read_value(c, v.element_type, e, what, source, depth + 1);
    switch (v.element_type) {
      case GgufValueType::string: v.strings.push_back(std::move(e.text)); break;
      case GgufValueType::float32: case GgufValueType::float64: v.reals.push_back(e.real); break;
      case GgufValueType::uint8: case GgufValueType::uint16: case GgufValueType::uint32:
      case GgufValueType::uint64:
        v.integers.push_back(static_cast<int64_t>(e.unsigned_integer));
        break;
      case GgufValueType::array: break;  // validated, not kept
      default: v.integers.push_back(e.integer); break;
    }
  }
}

void read_value(Cursor& c, GgufValueType t, GgufValue& v, const std::string& what,
                const std::string& source, int depth) {
  if (t == GgufValueType::string) {
    v.text = c.read_string(what);
  } else if (t == GgufValueType::array) {
    read_array(c, v, what, source, depth);
  } else {
    read_scalar(c, t, v, what);
  }
}

void read_metadata(Cursor& c, uint64_t count, GgufFile& f) {
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes.
  if (count > c.remaining() / 13)
    fail(f.source, "truncated or corrupt header: metadata count " + std::to_string(count) + " does not fit in the file");
  for (uint64_t i = 0; i < count; ++i) {
    std::string where = "metadata entry #" + std::to_string(i);
    std::string key = c.read_string(where + " key");
    GgufValue v;
    v.type = read_value_type(c, "metadata '" + key + "'", f.source);
    read_value(c, v.type, v, "metadata '" + key + "'", f.source, 0);
    if (!f.metadata.emplace(key, std::move(v)).second)
      fail(f.source, "metadata key '" + key + "' appears twice");
  }
}

GgufTensorInfo read_tensor_info(Cursor& c, uint64_t index, const std::string& source) {
  GgufTensorInfo t;
  t.name = c.read_string("tensor info #" + std::to_string(index) + " name");
  std::string what = "tensor '" + t.name + "'";
  auto n_dims = c.read<uint32_t>(what + " dimension count");
  if (n_dims == 0 || n_dims > kMaxGgufDims)
    fail(source, what + " has " + std::to_string(n_dims) + " dimensions (expected 1 to " +
                     std::to_string(kMaxGgufDims) + ")");
  unsigned __int128 elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    auto n = c.read<uint64_t>(what + " dimension");
    if (n == 0 || n > (1ull << 40)) fail(source, what + " has dimension " + std::to_string(n));
    t.dims.push_back(n);
    elements *= n;
    if (elements > (static_cast<unsigned __int128>(1) << 50))
      fail(source, what + " has too many elements");
  }
  t.n_elements = static_cast<uint64_t>(elements);
  t.type_id = c.read<uint32_t>(what + " type");
  auto traits = ggml_type_traits(t.type_id);
  if (!traits) fail(source, what + " has unknown ggml type id " + std::to_string(t.type_id));
  t.traits = *traits;
  if (t.dims[0] % t.traits.block_elements != 0)
    fail(source, what + " of type " + t.traits.name + " has rows of " + std::to_string(t.dims[0]) +
                     " elements, not a multiple of its block size " +
                     std::to_string(t.traits.block_elements));
  t.n_bytes = t.n_elements / t.traits.block_elements * t.traits.block_bytes;
  t.offset = c.read<uint64_t>(what + " data offset");
  return t;
}

void validate_tensor_data(GgufFile& f) {
  std::set<std::string> names;
  for (const auto& t : f.tensors) {
    std::string what = "tensor '" + t.name + "'";
    if (!names.insert(t.name).second) fail(f.source, what + " appears twice");
    if (t.offset % f.alignment != 0)
      fail(f.source, what + " data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                         std::to_string(f.alignment));
    uint64_t data_size = f.file_size - f.data_start;
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      fail(f.source, what + " data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
                         ") lies beyond the end of the file (data section is " +
                         std::to_string(data_size) + " bytes)");
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : f.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->n_bytes > by_offset[i]->offset)
      fail(f.source, "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name +
                         "' overlap in the data section");
}

}  // namespace

GgufFile parse_gguf(std::string_view bytes, uint64_t file_size, const std::string& source) {
  GgufFile f;
  f.source = source;
  f.file_size = file_size;
  if (bytes.size() > file_size) bytes = bytes.substr(0, file_size);
  Cursor c(bytes, f.source);
  if (bytes.size() < 4 || bytes.substr(0, 4) != "GGUF")
    fail(source, "bad magic (expected the 4 bytes 'GGUF' at the start of the file)");
  c.skip(4, "magic");
  f.version = c.read<uint32_t>("version");
  if (f.version == 1)
    fail(source, "GGUF version 1 is not supported (expected version 2 or 3; re-save the model with a current llama.cpp)");
  if (f.version != 2 && f.version != 3) {
    bool swapped = f.version == 0x02000000u || f.version == 0x03000000u;
    fail(source, "unsupported GGUF version " + std::to_string(f.version) +
                     (swapped ? " (a big-endian GGUF file, not supported)" : " (expected 2 or 3)"));
  }
  auto tensor_count = c.read<uint64_t>("tensor count");
  auto kv_count = c.read<uint64_t>("metadata count");
  read_metadata(c, kv_count, f);
  if (auto it = f.metadata.find("general.alignment"); it != f.metadata.end()) {
    const auto& v = it->second;
    uint64_t a = v.type == GgufValueType::uint32 || v.type == GgufValueType::uint64 ? v.unsigned_integer : 0;
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20))
      fail(source, "general.alignment must be a power of two (uint32), got a " +
                       gguf_value_type_name(v.type) + " " + std::to_string(a));
    f.alignment = a;
  }
  // A tensor info takes at least 8 (name length) + 4 (dims) + 8 (one dim) + 4 (type) + 8 (offset).
  if (tensor_count > c.remaining() / 32)
    fail(source, "truncated or corrupt header: tensor count " + std::to_string(tensor_count) + " does not fit in the file");
  for (uint64_t i = 0; i < tensor_count; ++i) f.tensors.push_back(read_tensor_info(c, i, source));
  uint64_t end_of_infos = c.pos();
  f.data_start = (end_of_infos + f.alignment - 1) / f.alignment * f.alignment;
  if (!f.tensors.empty() && f.data_start > file_size)
    fail(source, "truncated: the tensor data section would start at offset " +
                     std::to_string(f.data_start) + ", past the end of the file (" +
                     std::to_string(file_size) + " bytes)");
  if (f.data_start > file_size) f.data_start = file_size;  // a vocabulary-only file may end here
  validate_tensor_data(f);
  return f;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v,
                             const char* expected) {
  std::string found = gguf_value_type_name(v.type);
  if (v.type == GgufValueType::array) found += " of " + gguf_value_type_name(v.element_type);
  throw ConfigError(f.source + ": metadata '" + key + "' must be " + expected + ", got " + found);
}

}  // namespace

std::optional<uint64_t> GgufFile::get_uint(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  const auto& v = it->second;
  switch (v.type) {
    case GgufValueType::uint8: case GgufValueType::uint16: case GgufValueType::uint32:
    case GgufValueType::uint64:
      return v.unsigned_integer;
    case GgufValueType::int8: case GgufValueType::int16: case GgufValueType::int32:
    case GgufValueType::int64:
      if (v.integer >= 0) return static_cast<uint64_t>(v.integer);
      throw ConfigError(source + ": metadata '" + key + "' must not be negative, got " +
                        std::to_string(v.integer));
    default:
      wrong_type(*this, key, v, "an integer");
  }
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  const auto& v = it->second;
  if (v.type == GgufValueType::float32 || v.type == GgufValueType::float64) return v.real;
  if (fixed_size(v.type) != 0 && v.type != GgufValueType::boolean) {
    if (v.type == GgufValueType::uint8 || v.type == GgufValueType::uint16 ||
        v.type == GgufValueType::uint32 || v.type == GgufValueType::uint64)
      return static_cast<double>(v.unsigned_integer);
    return static_cast<double>(v.integer);
  }
  wrong_type(*this, key, v, "a number");
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  if (it->second.type != GgufValueType::boolean) wrong_type(*this, key, it->second, "a bool");
  return it->second.integer != 0;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  if (it->second.type != GgufValueType::string) wrong_type(*this, key, it->second, "a string");
  return it->second.text;
}

const std::vector<std::string>* GgufFile::get_strings(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return nullptr;
  const auto& v = it->second;
  if (v.type != GgufValueType::array || v.element_type != GgufValueType::string)
    wrong_type(*this, key, v, "an array of strings");
  return &v.strings;
}

const std::vector<int64_t>* GgufFile::get_integers(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return nullptr;
  const auto& v = it->second;
  if (v.type != GgufValueType::array || v.element_type == GgufValueType::string ||
      v.element_type == GgufValueType::array || v.element_type == GgufValueType::float32 ||
      v.element_type == GgufValueType::float64)
    wrong_type(*this, key, v, "an array of integers");
  return &v.integers;
}

const std::vector<double>* GgufFile::get_reals(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return nullptr;
  const auto& v = it->second;
  if (v.type != GgufValueType::array ||
      (v.element_type != GgufValueType::float32 && v.element_type != GgufValueType::float64))
    wrong_type(*this, key, v, "an array of floats");
  return &v.reals;
}

uint64_t GgufFile::require_uint(const std::string& key) const {
  auto v = get_uint(key);
  if (!v) throw ConfigError(source + ": missing required metadata '" + key + "'");
  return *v;
}

}  // namespace mlxrt::convert
