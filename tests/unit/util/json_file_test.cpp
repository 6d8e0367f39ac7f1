#include "mlxrt/util/json_file.h"

#include <gtest/gtest.h>

using mlxrt::ConfigError;
using mlxrt::JsonFields;
using mlxrt::json;

TEST(JsonFields, RequiredKeyMissingNamesKeyAndFile) {
  json j = {{"a", 1}};
  JsonFields f(j, "config.json");
  try {
    (void)f.required<int>("hidden_size");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("hidden_size"), std::string::npos);
  }
}

TEST(JsonFields, WrongTypeIsAnError) {
  json j = {{"hidden_size", "big"}};
  JsonFields f(j, "config.json");
  EXPECT_THROW((void)f.required<int>("hidden_size"), ConfigError);
}

TEST(JsonFields, IntegralFloatAccepted) {
  json j = {{"n", 4096.0}, {"x", 1.5}};
  JsonFields f(j, "c");
  EXPECT_EQ(f.required<int>("n"), 4096);
  EXPECT_THROW((void)f.required<int>("x"), ConfigError);
  EXPECT_EQ(f.value_or<int>("missing", 7), 7);
}
