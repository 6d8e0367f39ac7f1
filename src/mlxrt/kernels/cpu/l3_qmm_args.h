#pragma once
/** The plain-data call of the L3 affine quantized matmul (l3_matmul.h): what its instruction-set
 * files see. As affine_qmm_args.h, nothing here may pull in inline functions of other headers.
 *
 * The L3 arithmetic, the same bits on every instruction set (the scalar reference in
 * tests/unit/kernels/cpu_l3_matmul_test.cpp is its definition), per output (row r, column n):
 *  - x's row is quantized in blocks of 32 along k, twice: first as llama.cpp's Q8, amax = max |x|,
 *    d1 = amax / 127, x1 = nearbyint(x * (127 / amax)) (all 0 where amax is 0); then the
 *    remainder r = x - d1 * x1 the same way (d2, x2). So x reads as d1 * x1 + d2 * x2, within
 *    about 1/32000 of its block's largest value: one int8 level alone (KL ~3e-3 on SmolLM2)
 *    fails the project's L3 gate (mean KL <= 1e-3), two pass it with room to spare.
 *  - The weights stay affine 4 or 8 bits. For each block b, i1_b = sum of q * x1 and
 *    i2_b = sum of q * x2, exact in integers; acc = fma(float(i1_b), scale_g * d1_b, acc), then
 *    acc = fma(float(i2_b), scale_g * d2_b, acc), over the blocks in order.
 *  - The biases: xs_g = sum over the group's blocks, in order, of d1_b * float(sum of x1 over b)
 *    then d2_b * float(sum of x2 over b); bacc = fma(bias_g, xs_g, bacc) over the groups in order.
 *  - out = T(acc + bacc), rounded once to the output type.
 * Every output is computed alone, so its bits depend neither on the rows beside it (batching,
 * chunked prefill) nor on the instruction set or the number of threads. */
#include <cstdint>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"

namespace mlxrt::kernels::cpu {

constexpr int kL3Block = 32;     // k values per activation scale
constexpr int kL3TileRows = 16;  // weight rows (outputs) interleaved in one packed tile

/** A weight matrix as the L3 kernels read it: tiles of 16 rows (the last padded with zeros), each
 * tile `tile_words` 32-bit words, group after group (`l3_group_stride` words each): for each word
 * of the group's part of a row (group_size · bits / 32 of them), that word of the tile's 16 rows;
 * then the 16 rows' scales and the 16 rows' biases of the group, as float16 where every scale and
 * bias of the matrix is one exactly (`half`: checkpoints whose scales are float16, and the GGUF
 * conversions, whose Q4_1 / Q8_0 scales were; a decode step reads a sixth fewer bytes), else as
 * float32. Either way the kernel multiplies with the same float values. A tile is read front to
 * back, one stream of memory. */
inline long long l3_group_stride(int group_size, int bits, bool half) {
  return static_cast<long long>(group_size * bits / 32 + (half ? 1 : 2)) * kL3TileRows;
}
inline long long l3_tile_words(int k, int bits, int group_size, bool half) {
  return static_cast<long long>(k / group_size) * l3_group_stride(group_size, bits, half);
}

/** The packed array starts with this many words: word 0 is 1 where the scales and biases are
 * float16 (l3_tile_words), 0 where float32; the tiles follow. The array is sized for float32. */
constexpr int kL3HeaderWords = 16;

/** x's rows quantized (the first step above). Per row, 2k int8 values: for each word of a weight
 * row, its x1 then its x2 values in the order of the word's bytes (8 bits: 4 values in k order;
 * 4 bits: the 4 even then the 4 odd k of its 8, as a byte's low and high nibbles pair up, so 8
 * bytes of x1 then 8 of x2); then d1, d2 per block and xs per group. */
struct L3Rows {
  const std::int8_t* q = nullptr;
  const float* block_d = nullptr;
  const float* group_xs = nullptr;
};
constexpr int kL3Levels = 2;  // int8 levels of x: x1 and its remainder x2

struct L3QmmArgs {
  void* out = nullptr;  // rows × n, row-contiguous
  L3Rows x;
  const std::uint32_t* packed = nullptr;  // ceil(n / 16) tiles (after the header)
  bool half_params = false;               // scales and biases as float16
  int rows = 0;
  int n = 0;
  int k = 0;
  int bits = 0;  // 4 or 8
  int group_size = 0;
  QmmElem elem = QmmElem::f32;  // of out
};

/** Tiles one work unit covers: two (32 columns), so that the narrow matrices of a decode step
 * (a 192-row key projection is 12 tiles) still split evenly over the threads. */
constexpr int kL3TilesPerUnit = 2;

/** Units of kL3TilesPerUnit tiles by kRowsPerUnit rows, numbered as the affine_qmm_units_* units
 * are (row block major). One function per instruction set. */
void l3_qmm_units_avx512vnni(const L3QmmArgs& a, int begin, int end);
void l3_qmm_units_avx2(const L3QmmArgs& a, int begin, int end);
void l3_qmm_units_neondot(const L3QmmArgs& a, int begin, int end);  // aarch64 with the dot product
void l3_qmm_units_neon(const L3QmmArgs& a, int begin, int end);     // aarch64

/** One block of kL3Block values of x (float) quantized as above: its two levels' int8 values in k
 * order (q1, q2), d1 and d2 (d), and each level's sum of values (sums). One function per
 * instruction set; the same bits as the scalar definition. */
using L3QuantizeBlockFn = void (*)(const float* x, std::int8_t* q1, std::int8_t* q2, float* d, int* sums);
void l3_quantize_block_avx512vnni(const float* x, std::int8_t* q1, std::int8_t* q2, float* d, int* sums);
void l3_quantize_block_avx2(const float* x, std::int8_t* q1, std::int8_t* q2, float* d, int* sums);
void l3_quantize_block_neon(const float* x, std::int8_t* q1, std::int8_t* q2, float* d, int* sums);

}  // namespace mlxrt::kernels::cpu
