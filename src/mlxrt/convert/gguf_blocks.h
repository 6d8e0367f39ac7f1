#pragma once
/** GGUF quantized blocks re-expressed, losslessly, as MLX affine quantization.
 *
 * MLX affine: w = scale * q + bias, q unsigned with `bits` bits, one (scale, bias) per
 * `group_size` consecutive elements of a row, q packed little-end first into uint32 words
 * (element k of a row starts at bit bits*k of the row's little-endian bit stream).
 *
 *   Q4_1 (d, m, 32 x u4):  x = d*q + m          -> 4 bits, g32, scale d, bias m
 *   Q4_0 (d, 32 x u4):     x = d*(q - 8)        -> 4 bits, g32, scale d, bias -8d
 *   Q5_1 (d, m, 32 x u5):  x = d*q + m          -> 5 bits, g32, scale d, bias m
 *   Q5_0 (d, 32 x u5):     x = d*(q - 16)       -> 5 bits, g32, scale d, bias -16d
 *   Q8_0 (d, 32 x i8):     x = d*q              -> 8 bits, g32, q+128, scale d, bias -128d
 *   Q4_K / Q5_K (d, dmin, 8 x (6-bit sc, m), 256 x u4/u5): x = (d*sc)*q - dmin*m per 32
 *                          -> 4/5 bits, g32, scale d*sc, bias -dmin*m
 *   TQ1_0 / TQ2_0 (d, 256 ternary q): x = d*(q - 1) -> 2 bits, g128, scale d, bias -d
 *
 * Q2_K, Q3_K and Q6_K have 16-element sub-blocks, finer than any MLX group size, IQ4_NL /
 * IQ4_XS index a non-linear grid, and IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S
 * index lattice codebooks of 4 or 8 values (tables generated at build time from the gguf package):
 * they are stored dequantised as float32 instead, each value the one ggml's reference
 * dequantisation computes (dequantize_float32).
 *
 * Scales and biases are float32: the fp16 d, m widen exactly, -8d, -16d and -128d are exact (powers of
 * two), d*q is exact (at most 11+8 significant bits), so MLX's float32 dequantisation gives the
 * same float32 value that the GGUF reference dequantisation computes. In float16 the results
 * (e.g. d*15 + m) would be rounded to 11 bits and differ. No MLX dependency. */
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mlxrt/convert/gguf_file.h"

namespace mlxrt::convert {

struct AffineParams {
  int bits;
  int group_size;
};

/** The MLX affine parameters a ggml block type maps onto, or nullopt if it has no exact mapping. */
std::optional<AffineParams> affine_params_for(GgmlType type);

struct AffineTensor {
  AffineParams params{};
  uint64_t rows = 0, cols = 0;     // logical shape [rows, cols]
  std::vector<uint32_t> weight;    // [rows, cols * bits / 32]
  std::vector<float> scales;       // [rows, cols / group_size]
  std::vector<float> biases;       // [rows, cols / group_size]
};

/** Re-packs the blocks of `info` (its bytes at `data`) into MLX affine form. Output row r is
 * input row `row_order[r]` when `row_order` is given (a permutation of the rows). */
AffineTensor repack_affine(const GgufTensorInfo& info, const uint8_t* data,
                           const std::vector<uint64_t>* row_order = nullptr);

/** MXFP4 blocks (one E8M0 scale byte, 32 E2M1 codes: element j the low nibble of byte j, element
 * 16 + j its high nibble) in MLX's mxfp4 form: the same codes packed little-end first, the scale
 * bytes unchanged. MLX's value, code * 2^(scale - 127), is the one ggml computes for every scale byte
 * below 255 (the MX "not a number" scale, refused with UnsupportedError); ggml's zero code 8 is
 * +0 where MLX's is -0. */
struct Mxfp4Tensor {
  uint64_t rows = 0, cols = 0;
  std::vector<uint32_t> weight;  // [rows, cols / 8]
  std::vector<uint8_t> scales;   // [rows, cols / 32]
};
Mxfp4Tensor repack_mxfp4(const GgufTensorInfo& info, const uint8_t* data);

/** Whether dequantize_float32 handles this type (exactly). */
bool has_exact_float32(GgmlType type);

/** The float32 values llama.cpp's dequantisation gives, rows in `row_order` when given. */
std::vector<float> dequantize_float32(const GgufTensorInfo& info, const uint8_t* data,
                                      const std::vector<uint64_t>* row_order = nullptr);

/** Copies the rows of a plain (F32/F16/BF16) tensor in `row_order`, element bytes unchanged; the
 * rows of a 1-D tensor are its elements. */
std::vector<uint8_t> permute_plain_rows(const GgufTensorInfo& info, const uint8_t* data,
                                        const std::vector<uint64_t>& row_order);

/** Rows [begin, begin + count) of a 2-D tensor (elements, of a 1-D plain one; rows over all
 * leading dimensions, of a 3-D one) as a 2-D tensor of their own: the same name and type, its
 * offset moved to the first of them. */
GgufTensorInfo slice_rows(const GgufTensorInfo& info, uint64_t begin, uint64_t count);

/** Row order that undoes llama.cpp's Q/K permutation for its interleaved (GPT-J style) RoPE: for
 * each of `heads` heads of `rows / heads` rows, GGUF row 2j + a holds original row a*half + j. */
std::vector<uint64_t> unpermute_qk_rows(uint64_t rows, uint64_t heads);

/** The ggml tensor types the converter reads, by how: "F32, F16, ... (kept or repacked); Q2_K, ...
 * stored as float32", for messages and help. */
std::string supported_gguf_types();

/** IEEE half to float, exact. */
float half_to_float(uint16_t h);

}  // namespace mlxrt::convert
