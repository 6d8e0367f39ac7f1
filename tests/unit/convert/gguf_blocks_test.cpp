#include "mlxrt/convert/gguf_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "mlxrt/util/errors.h"

using namespace mlxrt::convert;

namespace {

uint16_t half_bits(float f) {  // exact for the values used here (representable in fp16)
  uint32_t b;
  std::memcpy(&b, &f, 4);
  uint32_t sign = (b >> 16) & 0x8000, exp = (b >> 23) & 0xff, mant = b & 0x7fffff;
  return static_cast<uint16_t>(sign | ((exp - 112) << 10) | (mant >> 13));
}

GgufTensorInfo info(GgmlType type, uint64_t cols, uint64_t rows) {
  GgufTensorInfo t;
  t.name.assign(1, 'w');
  t.dims = {cols, rows};
  t.type_id = static_cast<uint32_t>(type);
  t.traits = *ggml_type_traits(t.type_id);
  t.n_elements = cols * rows;
  t.n_bytes = t.n_elements / t.traits.block_elements * t.traits.block_bytes;
  return t;
}

/** MLX's affine dequantisation of element k of row r, written out from its definition (a
 * little-endian bit stream per row). */
float mlx_value(const AffineTensor& a, uint64_t r, uint64_t k) {
  int bits = a.params.bits;
  uint64_t words_per_row = a.cols * bits / 32, groups = a.cols / a.params.group_size;
  const uint32_t* row = a.weight.data() + r * words_per_row;
  uint64_t at = bits * k;
  uint64_t two = row[at / 32] | (at / 32 + 1 < words_per_row ? static_cast<uint64_t>(row[at / 32 + 1]) << 32 : 0);
  uint32_t q = static_cast<uint32_t>(two >> (at % 32)) & ((1u << bits) - 1);
  uint64_t g = r * groups + k / a.params.group_size;
  return a.scales[g] * static_cast<float>(q) + a.biases[g];
}

void put_half(std::vector<uint8_t>& b, size_t at, float v) {
  uint16_t h = half_bits(v);
  b[at] = h & 0xff;
  b[at + 1] = h >> 8;
}

}  // namespace

TEST(GgufBlocks, HalfToFloatIsExact) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));       // smallest subnormal
  EXPECT_EQ(half_to_float(0x03ff), 1023 * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
}

TEST(GgufBlocks, Q4_1MapsToScaleDBiasM) {
  std::vector<uint8_t> block(20);
  put_half(block, 0, 0.125f);
  put_half(block, 2, -1.5f);
  for (int j = 0; j < 16; ++j) block[4 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  auto a = repack_affine(info(GgmlType::q4_1, 32, 1), block.data());
  EXPECT_EQ(a.params.bits, 4);
  EXPECT_EQ(a.params.group_size, 32);
  ASSERT_EQ(a.weight.size(), 4u);
  EXPECT_EQ(a.weight[0], 0x76543210u);  // element 0 in the lowest nibble
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(mlx_value(a, 0, j), 0.125f * j - 1.5f);
    EXPECT_EQ(mlx_value(a, 0, j + 16), 0.125f * (15 - j) - 1.5f);
  }
}

TEST(GgufBlocks, Mxfp4KeepsCodesAndScaleBytesInMlxOrder) {
  std::vector<uint8_t> block(17);
  block[0] = 130;  // E8M0: 2^3
  for (int j = 0; j < 16; ++j) block[1 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  auto m = repack_mxfp4(info(GgmlType::mxfp4, 32, 1), block.data());
  ASSERT_EQ(m.weight.size(), 4u);
  ASSERT_EQ(m.scales, std::vector<uint8_t>{130});
  EXPECT_EQ(m.weight[0], 0x76543210u);  // element j < 16: low nibble of byte j, element 0 lowest
  EXPECT_EQ(m.weight[1], 0xFEDCBA98u);
  EXPECT_EQ(m.weight[2], 0x89ABCDEFu);  // elements 16..23: the high nibbles, 15 - j
  block[0] = 255;                       // MX's not-a-number scale
  try {
    repack_mxfp4(info(GgmlType::mxfp4, 32, 1), block.data());
    FAIL() << "expected UnsupportedError";
  } catch (const mlxrt::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("scale byte 255"), std::string::npos) << e.what();
  }
}

TEST(GgufBlocks, Q4_0MapsToBiasMinus8D) {
  std::vector<uint8_t> block(18);
  put_half(block, 0, -0.375f);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>((j * 7) % 16 | j << 4);
  auto a = repack_affine(info(GgmlType::q4_0, 32, 1), block.data());
  EXPECT_EQ(a.biases[0], 3.0f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(mlx_value(a, 0, j), -0.375f * ((j * 7) % 16 - 8));
    EXPECT_EQ(mlx_value(a, 0, j + 16), -0.375f * (j - 8));
  }
}

TEST(GgufBlocks, Q8_0MapsToOffsetBytes) {
  // Two rows of two blocks each, with extreme quants.
  auto t = info(GgmlType::q8_0, 64, 2);
  std::vector<uint8_t> data(t.n_bytes);
  for (int b = 0; b < 4; ++b) {
    put_half(data, b * 34, 0.5f * (b + 1));
    for (int j = 0; j < 32; ++j) data[b * 34 + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128 + b));
  }
  auto a = repack_affine(t, data.data());
  EXPECT_EQ(a.params.bits, 8);
  ASSERT_EQ(a.weight.size(), 2u * 16u);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 64; ++k) {
      int b = r * 2 + k / 32;
      int8_t q = static_cast<int8_t>(k % 32 * 8 - 128 + b);
      EXPECT_EQ(mlx_value(a, r, k), 0.5f * (b + 1) * q) << r << "," << k;
    }
}

TEST(GgufBlocks, RowOrderPermutesWholeRows) {
  auto t = info(GgmlType::q8_0, 32, 2);
  std::vector<uint8_t> data(t.n_bytes);
  put_half(data, 0, 1.0f);
  put_half(data, 34, 2.0f);
  std::vector<uint64_t> swap = {1, 0};
  auto a = repack_affine(t, data.data(), &swap);
  EXPECT_EQ(a.scales[0], 2.0f);
  EXPECT_EQ(a.scales[1], 1.0f);
}

TEST(GgufBlocks, UnpermuteUndoesLlamaCppPermute) {
  // llama.cpp: w.reshape(heads, 2, half, ...).swapaxes(1, 2): HF row h*hd + a*half + j lands at
  // GGUF row h*hd + 2j + a.
  const uint64_t heads = 3, head_dim = 8, rows = heads * head_dim, half = head_dim / 2;
  std::vector<uint64_t> gguf_holds(rows);
  for (uint64_t h = 0; h < heads; ++h)
    for (uint64_t a = 0; a < 2; ++a)
      for (uint64_t j = 0; j < half; ++j) gguf_holds[h * head_dim + 2 * j + a] = h * head_dim + a * half + j;
  auto order = unpermute_qk_rows(rows, heads);
  for (uint64_t r = 0; r < rows; ++r) EXPECT_EQ(gguf_holds[order[r]], r);
  EXPECT_EQ((std::vector<uint64_t>(order.begin(), order.begin() + 8)),
            (std::vector<uint64_t>{0, 2, 4, 6, 1, 3, 5, 7}));
}

TEST(GgufBlocks, PlainRowsArePermutedBytewise) {
  auto t = info(GgmlType::f16, 2, 3);
  std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto out = permute_plain_rows(t, data.data(), {2, 0, 1});
  EXPECT_EQ(out, (std::vector<uint8_t>{9, 10, 11, 12, 1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(GgufBlocks, A1DVectorsRowsAreItsElements) {
  // A permuted q_proj.bias: one float32 per row.
  auto t = info(GgmlType::f32, 4, 1);
  t.dims = {4};
  std::vector<uint8_t> data(16);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  auto out = permute_plain_rows(t, data.data(), {0, 2, 1, 3});
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15}));
}

TEST(GgufBlocks, TypesWithoutAnExactAffineFormAreRefused) {
  auto t = info(GgmlType::q3_k, 256, 1);
  std::vector<uint8_t> data(t.n_bytes);
  EXPECT_FALSE(affine_params_for(GgmlType::q3_k).has_value());
  EXPECT_FALSE(affine_params_for(GgmlType::q6_k).has_value());  // 16-element groups: float32 instead
  EXPECT_THROW(repack_affine(t, data.data()), mlxrt::UnsupportedError);
  // Q8_K is ggml's intermediate type for dot products, not a weight format the converter reads.
  auto q8k = info(GgmlType::q8_k, 256, 1);
  std::vector<uint8_t> q8k_data(q8k.n_bytes);
  EXPECT_FALSE(has_exact_float32(GgmlType::q8_k));
  EXPECT_THROW(dequantize_float32(q8k, q8k_data.data()), mlxrt::UnsupportedError);
  EXPECT_TRUE(has_exact_float32(GgmlType::iq2_xxs));  // the IQ grids: float32 since the generated tables
}

TEST(GgufBlocks, Q5_0AndQ5_1UseTheHighBitsAndA5BitStream) {
  for (bool with_min : {false, true}) {
    std::vector<uint8_t> block(with_min ? 24 : 22);
    put_half(block, 0, 0.25f);
    if (with_min) put_half(block, 2, 0.5f);
    size_t qh_at = with_min ? 4 : 2;
    uint32_t qh = 0xA5C3F00Fu;
    for (int i = 0; i < 4; ++i) block[qh_at + i] = static_cast<uint8_t>(qh >> (8 * i));
    for (int j = 0; j < 16; ++j) block[qh_at + 4 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
    auto a = repack_affine(info(with_min ? GgmlType::q5_1 : GgmlType::q5_0, 32, 1), block.data());
    EXPECT_EQ(a.params.bits, 5);
    ASSERT_EQ(a.weight.size(), 5u);
    for (int j = 0; j < 16; ++j) {
      int q0 = j | ((qh >> j) & 1) << 4, q1 = (15 - j) | ((qh >> (j + 16)) & 1) << 4;
      float want0 = with_min ? 0.25f * q0 + 0.5f : 0.25f * (q0 - 16);
      float want1 = with_min ? 0.25f * q1 + 0.5f : 0.25f * (q1 - 16);
      EXPECT_EQ(mlx_value(a, 0, j), want0) << j;
      EXPECT_EQ(mlx_value(a, 0, j + 16), want1) << j;
    }
  }
}
