#include "mlxrt/io/quantization.h"

#include <gtest/gtest.h>

#include "mlxrt/util/errors.h"

using namespace mlxrt;
using namespace mlxrt::io;
using nlohmann::json;

TEST(QuantizationMap, AbsentMeansUnquantized) {
  auto m = QuantizationMap::from_config(json{{"model_type", "x"}}, "c");
  EXPECT_FALSE(m.present());
  EXPECT_EQ(m.for_module("a", 128, SavedQuantTensors{16, 2, false}), std::nullopt);
}

TEST(QuantizationMap, InfersFromSavedShapesAsMlxLm) {
  auto m = QuantizationMap::from_config(json{{"quantization", {{"group_size", 64}, {"bits", 4}}}}, "c");
  ASSERT_TRUE(m.present());
  // A 128-wide 8-bit g32 layer saved under a 4-bit g64 global setting: the shapes decide.
  auto spec = m.for_module("model.layers.0.mlp.down_proj", 128, SavedQuantTensors{32, 4, false});
  ASSERT_TRUE(spec);
  EXPECT_EQ(*spec, (QuantSpec{32, 8, "affine"}));
  EXPECT_EQ(m.for_module("x", 128, std::nullopt), std::nullopt);  // no .scales saved
  EXPECT_EQ(*m.for_module("x", 128, SavedQuantTensors{16, 4, true}), (QuantSpec{32, 4, "mxfp4"}));
  EXPECT_EQ(*m.for_module("x", 128, SavedQuantTensors{16, 8, true}), (QuantSpec{16, 4, "nvfp4"}));
  EXPECT_EQ(*m.for_module("x", 128, SavedQuantTensors{32, 4, true}), (QuantSpec{32, 8, "mxfp8"}));
  EXPECT_THROW(m.for_module("x", 128, SavedQuantTensors{8, 4, true}), UnsupportedError);
}

TEST(QuantizationMap, OverridesWin) {
  json q = {{"group_size", 64}, {"bits", 4}, {"mode", "affine"},
            {"model.a", false}, {"model.b", {{"bits", 8}, {"group_size", 32}}}, {"model.c", {{"mode", "mxfp4"}}}};
  auto m = QuantizationMap::from_config(json{{"quantization", q}}, "c");
  EXPECT_EQ(m.for_module("model.a", 128, SavedQuantTensors{16, 2, false}), std::nullopt);
  EXPECT_EQ(*m.for_module("model.b", 128, std::nullopt), (QuantSpec{32, 8, "affine"}));
  EXPECT_EQ(*m.for_module("model.c", 128, std::nullopt), (QuantSpec{32, 4, "mxfp4"}));
}

TEST(QuantizationMap, RejectsWhatMlxCannotRun) {
  for (auto [bits, gs] : std::vector<std::pair<int, int>>{{7, 64}, {4, 48}, {1, 64}}) {
    json q = {{"group_size", 64}, {"bits", 4}, {"model.x", {{"bits", bits}, {"group_size", gs}}}};
    auto m = QuantizationMap::from_config(json{{"quantization", q}}, "config.json");
    EXPECT_THROW(m.for_module("model.x", 128, std::nullopt), UnsupportedError) << bits << " " << gs;
  }
  EXPECT_THROW(QuantizationMap::from_config(json{{"quantization", {{"bits", 4}}}}, "c"), ConfigError);
  EXPECT_THROW(QuantizationMap::from_config(json{{"quantization_config", {{"quant_method", "awq"}}}}, "c"),
               UnsupportedError);
  auto legacy = QuantizationMap::from_config(json{{"quantization_config", {{"quant_method", "mxfp4"}}}}, "c");
  EXPECT_EQ(legacy.global(), (QuantSpec{32, 4, "mxfp4"}));
}
