#include "mlxrt/io/safetensors_header.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mlxrt/util/errors.h"

using mlxrt::WeightsError;
using mlxrt::io::parse_safetensors_header;

namespace {

std::string file_with(const nlohmann::json& header, size_t data_bytes, int64_t length_delta = 0) {
  std::string h = header.dump();
  uint64_t n = h.size() + length_delta;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + h + std::string(data_bytes, '\0');
}

std::string error_of(const std::string& file) {
  try {
    parse_safetensors_header(file, file.size(), "w.safetensors");
  } catch (const WeightsError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SafetensorsHeader, ValidFileParses) {
  nlohmann::json h = {{"a", {{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 12}}}},
                      {"b", {{"dtype", "U32"}, {"shape", {1}}, {"data_offsets", {12, 16}}}},
                      {"__metadata__", {{"format", "mlx"}}}};
  auto f = file_with(h, 16);
  auto header = parse_safetensors_header(f, f.size(), "w");
  ASSERT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.metadata.at("format"), "mlx");
  EXPECT_EQ(header.data_start, f.size() - 16);
}

TEST(SafetensorsHeader, RejectsEachKindOfLie) {
  auto entry = [](const char* dt, std::vector<int> shape, uint64_t b, uint64_t e) {
    return nlohmann::json{{"dtype", dt}, {"shape", shape}, {"data_offsets", {b, e}}};
  };
  EXPECT_NE(error_of("abc").find("shorter"), std::string::npos);
  EXPECT_NE(error_of(file_with({{"a", entry("F32", {1}, 0, 4)}}, 4, 1000)).find("beyond the end"),
            std::string::npos);
  EXPECT_NE(error_of(file_with({{"a", entry("Q7", {1}, 0, 4)}}, 4)).find("unknown dtype 'Q7'"),
            std::string::npos);
  EXPECT_NE(error_of(file_with({{"a", entry("F32", {2}, 0, 4)}}, 8)).find("need 8 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(file_with({{"a", entry("F32", {4}, 0, 16)}}, 8)).find("beyond the end"),
            std::string::npos);
  EXPECT_NE(error_of(file_with({{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F32", {1}, 4, 8)}}, 8))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(error_of(file_with(nlohmann::json::array({1}), 0)).find("not a JSON object"), std::string::npos);
  std::string raw = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string dupfile(8, '\0');
  dupfile[0] = static_cast<char>(raw.size());
  dupfile += raw + std::string(4, '\0');
  EXPECT_NE(error_of(dupfile).find("appears twice"), std::string::npos);
  EXPECT_NE(error_of(std::string(8, '\0') + "").find("not valid JSON"), std::string::npos);
}
