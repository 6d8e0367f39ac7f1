#include "mlxrt/convert/gguf_file.h"

#include <gtest/gtest.h>

#include "gguf_builder.h"
#include "mlxrt/util/errors.h"

using mlxrt::ConfigError;
using mlxrt::WeightsError;
using mlxrt::convert::GgufFile;
using mlxrt::convert::parse_gguf;
using mlxrt::convert::testing::GgufBuilder;

namespace {

std::string error_of(const std::string& bytes) {
  try {
    parse_gguf(bytes, bytes.size(), "m.gguf");
  } catch (const WeightsError& e) {
    return e.what();
  }
  return "";
}

GgufBuilder small_model() {
  GgufBuilder b;
  b.str("general.architecture", "llama").u32("llama.block_count", 2).f32("llama.rope.freq_base", 1e4f);
  b.boolean("tokenizer.ggml.add_bos_token", true).strings("tokenizer.ggml.tokens", {"a", "b", "<s>"});
  b.i32s("tokenizer.ggml.token_type", {1, 1, 3});
  b.tensor("norm.weight", {4}, 0, std::string(16, '\1'));          // F32
  b.tensor("q.weight", {32, 2}, 8, std::string(2 * 34, '\2'));     // Q8_0: 2 rows of one block
  return b;
}

}  // namespace

TEST(GgufFile, ValidFileParses) {
  auto bytes = small_model().build();
  GgufFile f = parse_gguf(bytes, bytes.size(), "m.gguf");
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_uint("llama.block_count"), 2u);
  EXPECT_FLOAT_EQ(*f.get_float("llama.rope.freq_base"), 1e4f);
  EXPECT_TRUE(*f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens")->at(2), "<s>");
  EXPECT_EQ(f.get_integers("tokenizer.ggml.token_type")->at(2), 3);
  ASSERT_EQ(f.tensors.size(), 2u);
  const auto* q = f.find_tensor("q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->n_bytes, 68u);
  EXPECT_EQ(q->rows(), 2u);
  EXPECT_EQ(std::string(q->traits.name), "Q8_0");
  EXPECT_EQ(f.data_start % 32, 0u);
  EXPECT_FALSE(f.get_uint("missing").has_value());
}

TEST(GgufFile, WrongMetadataTypeIsAConfigErrorNamingTheKey) {
  auto bytes = small_model().build();
  GgufFile f = parse_gguf(bytes, bytes.size(), "m.gguf");
  try {
    (void)f.get_uint("general.architecture");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("string"), std::string::npos);
  }
  EXPECT_THROW((void)f.require_uint("llama.context_length"), ConfigError);
}

TEST(GgufFile, BadMagicAndVersions) {
  auto bytes = small_model().build();
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(error_of(bad).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of(GgufBuilder(1).build()).find("version 1"), std::string::npos);
  EXPECT_NE(error_of(GgufBuilder(7).build()).find("unsupported GGUF version 7"), std::string::npos);
  EXPECT_NE(error_of(GgufBuilder(0x03000000).build()).find("big-endian"), std::string::npos);
  EXPECT_NE(error_of("").find("bad magic"), std::string::npos);
}

TEST(GgufFile, EveryTruncationIsAnErrorNotACrash) {
  auto bytes = small_model().build();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto msg = error_of(bytes.substr(0, n));
    EXPECT_FALSE(msg.empty()) << "prefix of " << n << " bytes was accepted";
    EXPECT_NE(msg.find("m.gguf"), std::string::npos) << msg;
  }
}

TEST(GgufFile, LyingTensorOffsetsAreRejected) {
  GgufBuilder beyond;
  beyond.tensor("w", {32, 1}, 8, "", 1 << 20);
  EXPECT_NE(error_of(beyond.build()).find("beyond the end"), std::string::npos);

  GgufBuilder misaligned;
  misaligned.tensor("a", {4}, 0, std::string(16, '\0')).tensor("w", {4}, 0, "", 4);
  EXPECT_NE(error_of(misaligned.build() + std::string(64, '\0')).find("alignment"), std::string::npos);

  GgufBuilder overlap;
  overlap.tensor("a", {16}, 0, std::string(64, '\0')).tensor("b", {16}, 0, "", 32);
  EXPECT_NE(error_of(overlap.build() + std::string(64, '\0')).find("overlap"), std::string::npos);

  GgufBuilder twice;
  twice.tensor("a", {4}, 0, std::string(16, '\0')).tensor("a", {4}, 0, std::string(16, '\0'));
  EXPECT_NE(error_of(twice.build()).find("appears twice"), std::string::npos);
}

TEST(GgufFile, BadTensorGeometryIsRejected) {
  GgufBuilder unknown;
  unknown.tensor("w", {32}, 99, std::string(32, '\0'));
  EXPECT_NE(error_of(unknown.build()).find("unknown ggml type id 99"), std::string::npos);

  GgufBuilder ragged;
  ragged.tensor("w", {33}, 2, std::string(64, '\0'));  // Q4_0 rows must be whole blocks
  EXPECT_NE(error_of(ragged.build()).find("block size 32"), std::string::npos);

  GgufBuilder zero;
  zero.tensor("w", {0}, 0, "");
  EXPECT_NE(error_of(zero.build()).find("dimension 0"), std::string::npos);
}

TEST(GgufFile, LyingCountsAreRejectedWithoutAllocating) {
  std::string huge_array = "GGUF" + GgufBuilder::pod<uint32_t>(3) + GgufBuilder::pod<uint64_t>(0) +
                           GgufBuilder::pod<uint64_t>(1) + GgufBuilder::string("k") +
                           GgufBuilder::pod<uint32_t>(9) + GgufBuilder::pod<uint32_t>(8) +
                           GgufBuilder::pod<uint64_t>(1ull << 60);
  EXPECT_NE(error_of(huge_array).find("does not fit"), std::string::npos);
  std::string huge_counts = "GGUF" + GgufBuilder::pod<uint32_t>(3) + GgufBuilder::pod<uint64_t>(~0ull) +
                            GgufBuilder::pod<uint64_t>(0);
  EXPECT_NE(error_of(huge_counts).find("tensor count"), std::string::npos);
  std::string huge_string = "GGUF" + GgufBuilder::pod<uint32_t>(3) + GgufBuilder::pod<uint64_t>(0) +
                            GgufBuilder::pod<uint64_t>(1) + GgufBuilder::pod<uint64_t>(1ull << 62) +
                            std::string(64, 'k');
  EXPECT_NE(error_of(huge_string).find("length"), std::string::npos);
}

TEST(GgufFile, DuplicateKeysAndBadAlignmentAreRejected) {
  GgufBuilder dup;
  dup.u32("a", 1).u32("a", 2);
  EXPECT_NE(error_of(dup.build()).find("appears twice"), std::string::npos);
  GgufBuilder align;
  align.u32("general.alignment", 24);
  EXPECT_NE(error_of(align.build()).find("power of two"), std::string::npos);
}
