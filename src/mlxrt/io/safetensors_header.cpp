#include "mlxrt/io/safetensors_header.h"

#include <algorithm>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "mlxrt/util/errors.h"

namespace mlxrt::io {

using nlohmann::json;

size_t safetensors_dtype_size(std::string_view dtype) {
  static const std::map<std::string_view, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"U16", 2}, {"I16", 2},  {"F16", 2},  {"BF16", 2},
      {"U32", 4},  {"I32", 4}, {"F32", 4}, {"U64", 8}, {"I64", 8},  {"F64", 8},  {"C64", 8},
  };
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw WeightsError(source + ": invalid safetensors file: " + what);
}

uint64_t read_le64(std::string_view bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

std::vector<int64_t> parse_shape(const json& shape, const std::string& source, const std::string& name) {
  if (!shape.is_array()) fail(source, "tensor '" + name + "': 'shape' must be a list of integers");
  std::vector<int64_t> dims;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      fail(source, "tensor '" + name + "': 'shape' must hold non-negative integers");
    uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT32_MAX)) fail(source, "tensor '" + name + "': dimension too large");
    dims.push_back(static_cast<int64_t>(v));
  }
  return dims;
}

SafetensorsTensor parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                              const std::string& source) {
  if (!entry.is_object()) fail(source, "tensor '" + name + "' is not an object");
  SafetensorsTensor t;
  t.name = name;
  if (!entry.contains("dtype") || !entry["dtype"].is_string())
    fail(source, "tensor '" + name + "': missing string 'dtype'");
  t.dtype = entry["dtype"].get<std::string>();
  size_t elem = safetensors_dtype_size(t.dtype);
  if (elem == 0) fail(source, "tensor '" + name + "': unknown dtype '" + t.dtype + "'");
  if (!entry.contains("shape")) fail(source, "tensor '" + name + "': missing 'shape'");
  t.shape = parse_shape(entry["shape"], source, name);
  if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
      entry["data_offsets"].size() != 2 || !entry["data_offsets"][0].is_number_unsigned() ||
      !entry["data_offsets"][1].is_number_unsigned())
    fail(source, "tensor '" + name + "': 'data_offsets' must be two non-negative integers");
  t.begin = entry["data_offsets"][0].get<uint64_t>();
  t.end = entry["data_offsets"][1].get<uint64_t>();
  if (t.begin > t.end) fail(source, "tensor '" + name + "': data_offsets begin > end");
  if (t.end > data_size)
    fail(source, "tensor '" + name + "': byte range [" + std::to_string(t.begin) + ", " +
                     std::to_string(t.end) + ") lies beyond the end of the file (data section is " +
                     std::to_string(data_size) + " bytes)");
  // shape x element size must equal the byte range; multiply with overflow checks.
  unsigned __int128 bytes = elem;
  for (int64_t d : t.shape) {
    bytes *= static_cast<uint64_t>(d);
    if (bytes > (static_cast<unsigned __int128>(1) << 64)) break;
  }
  if (bytes != static_cast<unsigned __int128>(t.end - t.begin))
    fail(source, "tensor '" + name + "': shape and dtype " + t.dtype + " need " +
                     (bytes > UINT64_MAX ? std::string("more than 2^64") : std::to_string(static_cast<uint64_t>(bytes))) +
                     " bytes but data_offsets span " + std::to_string(t.end - t.begin));
  return t;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view bytes, uint64_t file_size,
                                           const std::string& source) {
  if (file_size < 8 || bytes.size() < 8) fail(source, "file is shorter than the 8-byte header length");
  uint64_t n = read_le64(bytes);
  if (n > file_size - 8)
    fail(source, "header length " + std::to_string(n) + " goes beyond the end of the file (" +
                     std::to_string(file_size) + " bytes)");
  if (n > kMaxSafetensorsHeader) fail(source, "header length " + std::to_string(n) + " exceeds 100 MiB");
  if (bytes.size() < 8 + n) fail(source, "header is truncated");
  std::string_view text = bytes.substr(8, n);

  // Duplicate top-level names would silently shadow each other: reject them while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    fail(source, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) fail(source, "tensor '" + duplicate + "' appears twice in the header");
  if (!header.is_object()) fail(source, "header is not a JSON object");

  SafetensorsHeader out;
  out.data_start = 8 + n;
  uint64_t data_size = file_size - out.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_null()) continue;  // MLX writes null when there is no metadata
      if (!it->is_object()) fail(source, "'__metadata__' must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(source, "'__metadata__' value for '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(it.key(), *it, data_size, source));
  }

  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& t : out.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* cur = by_offset[i];
    if (cur->begin < prev->end)
      fail(source, "tensors '" + prev->name + "' and '" + cur->name + "' overlap");
  }
  return out;
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw WeightsError(source + ": cannot read file (" + ec.message() + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw WeightsError(source + ": cannot open file");
  std::string bytes(8, '\0');
  if (size < 8 || !in.read(bytes.data(), 8)) fail(source, "file is shorter than the 8-byte header length");
  uint64_t n = read_le64(bytes);
  if (n > size - 8 || n > kMaxSafetensorsHeader) return parse_safetensors_header(bytes, size, source);
  bytes.resize(8 + n);
  if (!in.read(bytes.data() + 8, static_cast<std::streamsize>(n))) fail(source, "header is truncated");
  return parse_safetensors_header(bytes, size, source);
}

}  // namespace mlxrt::io
