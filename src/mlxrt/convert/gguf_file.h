#pragma once
/** The GGUF container (llama.cpp's model file): header, typed metadata and tensor directory,
 * parsed and validated before any tensor byte is trusted. Independent of MLX so that it can be
 * fuzzed on its own. Layout: magic "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata
 * count, the metadata key/values, the tensor infos, padding to `general.alignment`, tensor data. */
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlxrt::convert {

/** Metadata value types, with GGUF's numbering. */
enum class GgufValueType : uint32_t {
  uint8 = 0, int8 = 1, uint16 = 2, int16 = 3, uint32 = 4, int32 = 5, float32 = 6,
  boolean = 7, string = 8, array = 9, uint64 = 10, int64 = 11, float64 = 12,
};

/** ggml tensor types, with ggml's numbering (only those that appear in GGUF files). */
enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22,
  iq4_xs = 23, i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
  tq1_0 = 34, tq2_0 = 35, mxfp4 = 39, nvfp4 = 40, q1_0 = 41,
};

/** Elements per block and bytes per block of a ggml type; nullopt for an unknown type id. */
struct GgmlTypeTraits {
  const char* name;
  uint32_t block_elements;
  uint32_t block_bytes;
};
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);

/** One metadata value. Scalars are widened (signed integers and booleans to `integer`, unsigned
 * to `unsigned_integer`, floats to `real`); arrays keep their element type and fill the vector
 * of that kind. Nested arrays are validated and counted, their contents are not kept. */
struct GgufValue {
  GgufValueType type = GgufValueType::uint8;
  GgufValueType element_type = GgufValueType::uint8;  // arrays only
  int64_t integer = 0;
  uint64_t unsigned_integer = 0;
  double real = 0;
  std::string text;
  uint64_t array_size = 0;
  std::vector<std::string> strings;   // string arrays
  std::vector<int64_t> integers;      // integer and boolean arrays (u64 kept as its bit pattern)
  std::vector<double> reals;          // float arrays
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the fastest-moving (a row's length)
  uint32_t type_id = 0;
  GgmlTypeTraits traits{};
  uint64_t offset = 0;         // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;

  GgmlType type() const { return static_cast<GgmlType>(type_id); }
  /** Rows of dims[0] elements each (product of the other dims). */
  uint64_t rows() const { return dims.empty() ? 0 : n_elements / dims[0]; }
};

struct GgufFile {
  std::string source;          // the file name, for messages
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;     // file offset of the tensor data section
  uint64_t file_size = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order

  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed metadata access. Missing keys give nullopt; a present key of the wrong type throws
  // ConfigError naming the file, the key, and the type found.
  std::optional<uint64_t> get_uint(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  const std::vector<std::string>* get_strings(const std::string& key) const;
  const std::vector<int64_t>* get_integers(const std::string& key) const;
  const std::vector<double>* get_reals(const std::string& key) const;
  /** Like get_uint, but throws ConfigError when the key is missing. */
  uint64_t require_uint(const std::string& key) const;
};

/** Largest metadata string or array we accept, as a guard against lying lengths. */
inline constexpr uint64_t kMaxGgufArray = 1ull << 28;
inline constexpr uint32_t kMaxGgufDims = 4;

/** Parses and validates `bytes` (a whole GGUF file, or at least everything before its data
 * section, of a file of `file_size` bytes). Checks: magic, version 2 or 3, every length and count
 * inside the file, known value and tensor types, dims and block sizes, alignment, unique tensor
 * names, tensor data inside the file without overlaps. Throws WeightsError naming `source`. */
GgufFile parse_gguf(std::string_view bytes, uint64_t file_size, const std::string& source);

/** Name of a metadata value type, for messages. */
std::string gguf_value_type_name(GgufValueType type);

}  // namespace mlxrt::convert
