#include "mlxrt/convert/gguf_blocks.h"

#include <cstring>
#include <string>

#include "mlxrt/convert/gguf_iq_tables.h"  // generated at build time from the gguf package
#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal half: normalise into a float
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mantissa & 0x3ff) << 13;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 112) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::optional<AffineParams> affine_params_for(GgmlType type) {
  switch (type) {
    case GgmlType::q4_0: case GgmlType::q4_1: return AffineParams{4, 32};
    case GgmlType::q5_0: case GgmlType::q5_1: return AffineParams{5, 32};
    case GgmlType::q4_k: return AffineParams{4, 32};
    case GgmlType::q5_k: return AffineParams{5, 32};
    case GgmlType::q8_0: return AffineParams{8, 32};
    // The ternary formats: one fp16 d per 256 elements, x = d*(q - 1) with q in 0..2 (TQ2_0's
    // unused q = 3 gives 2d): 2 bits, scale d, bias -d, in groups of 128 (two per block).
    case GgmlType::tq1_0: case GgmlType::tq2_0: return AffineParams{2, 128};
    default: return std::nullopt;
  }
}

namespace {

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

/** Unpacks one 32-element block into unsigned quants q[32] and its (scale, bias). */
void decode_group32(GgmlType type, const uint8_t* block, uint8_t* q, float& scale, float& bias) {
  float d = half_to_float(load_u16(block));
  scale = d;
  switch (type) {
    case GgmlType::q4_0:
      for (int j = 0; j < 16; ++j) {
        q[j] = block[2 + j] & 0x0f;
        q[j + 16] = block[2 + j] >> 4;
      }
      bias = -8.0f * d;
      break;
    case GgmlType::q4_1:
      bias = half_to_float(load_u16(block + 2));
      for (int j = 0; j < 16; ++j) {
        q[j] = block[4 + j] & 0x0f;
        q[j + 16] = block[4 + j] >> 4;
      }
      break;
    case GgmlType::q5_0:
    case GgmlType::q5_1: {
      // Low nibbles as in Q4_x, the fifth bit of element j in bit j of the 32-bit qh.
      bool has_min = type == GgmlType::q5_1;
      const uint8_t* qh_bytes = block + (has_min ? 4 : 2);
      const uint8_t* qs = qh_bytes + 4;
      uint32_t qh = static_cast<uint32_t>(qh_bytes[0]) | qh_bytes[1] << 8 | qh_bytes[2] << 16 |
                    static_cast<uint32_t>(qh_bytes[3]) << 24;
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<uint8_t>((qs[j] & 0x0f) | ((qh >> j) & 1) << 4);
        q[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
      }
      bias = has_min ? half_to_float(load_u16(block + 2)) : -16.0f * d;
      break;
    }
    default:  // q8_0: signed bytes, offset by 128 into MLX's unsigned range
      for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(static_cast<int8_t>(block[2 + j]) + 128);
      bias = -128.0f * d;
      break;
  }
}

/** Q4_K / Q5_K sub-block j's 6-bit scale and min, packed in 12 bytes (llama.cpp's
 * get_scale_min_k4). */
void scale_min_k4(int j, const uint8_t* packed, int& scale, int& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = (packed[j + 4] & 0x0f) | (packed[j - 4] >> 6) << 4;
    min = (packed[j + 4] >> 4) | (packed[j] >> 6) << 4;
  }
}

/** One 256-element Q4_K / Q5_K super-block: eight 32-element sub-blocks with x = (d*sc)*q - dmin*m.
 * d*sc and dmin*m are exact in float32 (11-bit halves times 6-bit integers). */
void decode_k_block(GgmlType type, const uint8_t* block, uint8_t* q, float* scales, float* biases) {
  float d = half_to_float(load_u16(block)), dmin = half_to_float(load_u16(block + 2));
  const uint8_t* packed = block + 4;
  bool five = type == GgmlType::q5_k;
  const uint8_t* qh = block + 16;                 // Q5_K only: 32 bytes, bit j = sub-block j
  const uint8_t* qs = block + (five ? 48 : 16);   // 128 bytes of nibbles
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, packed, sc, m);
    scales[j] = d * static_cast<float>(sc);
    biases[j] = -(dmin * static_cast<float>(m));
    const uint8_t* nibbles = qs + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      uint8_t v = j % 2 == 0 ? nibbles[l] & 0x0f : nibbles[l] >> 4;
      if (five) v |= ((qh[l] >> j) & 1) << 4;
      q[32 * j + l] = v;
    }
  }
}

/** TQ2_0 (66 bytes / 256): 64 bytes of 2-bit quants, fp16 d. Byte j*32 + m holds, in bit pairs
 * l = 0..3, elements j*128 + l*32 + m. */
void decode_tq2_0(const uint8_t* block, uint8_t* q) {
  for (int e = 0; e < 256; ++e) q[e] = (block[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/** TQ1_0 (54 bytes / 256): 48 bytes of five base-3 digits each, 4 bytes of four more, fp16 d.
 * Digit n of byte b is ((uint8_t)(b * 3^n) * 3) >> 8, as ggml extracts it; bytes 0..31 give
 * elements n*32 + m, bytes 32..47 elements 160 + n*16 + m, the last four 240 + n*4 + j. */
void decode_tq1_0(const uint8_t* block, uint8_t* q) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  auto digit = [](uint8_t byte, int n) {
    return static_cast<uint8_t>((static_cast<uint16_t>(static_cast<uint8_t>(byte * kPow3[n])) * 3) >> 8);
  };
  int e = 0;
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 32; ++m) q[e++] = digit(block[m], n);
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 16; ++m) q[e++] = digit(block[32 + m], n);
  for (int n = 0; n < 4; ++n)
    for (int j = 0; j < 4; ++j) q[e++] = digit(block[48 + j], n);
}

/** Unpacks one block of any affine type: block_elements quants and one (scale, bias) per group. */
void decode_block(GgmlType type, const uint8_t* block, uint8_t* q, float* scales, float* biases) {
  if (type == GgmlType::q4_k || type == GgmlType::q5_k) return decode_k_block(type, block, q, scales, biases);
  if (type == GgmlType::tq1_0 || type == GgmlType::tq2_0) {
    const int d_at = type == GgmlType::tq1_0 ? 52 : 64;
    const float d = half_to_float(load_u16(block + d_at));
    (type == GgmlType::tq1_0 ? decode_tq1_0 : decode_tq2_0)(block, q);
    for (int g = 0; g < 2; ++g) {
      scales[g] = d;
      biases[g] = -d;  // d*q - d: exact for q <= 3, as ggml's (q - 1)*d
    }
    return;
  }
  decode_group32(type, block, q, scales[0], biases[0]);
}

}  // namespace

AffineTensor repack_affine(const GgufTensorInfo& info, const uint8_t* data,
                           const std::vector<uint64_t>* row_order) {
  auto params = affine_params_for(info.type());
  if (!params)
    throw UnsupportedError("tensor '" + info.name + "' has type " + info.traits.name +
                           ", which has no exact MLX affine form (supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, "
                           "TQ1_0, TQ2_0)");
  AffineTensor out;
  out.params = *params;
  out.cols = info.dims[0];
  out.rows = info.rows();
  const uint64_t group = params->group_size, block_elements = info.traits.block_elements;
  const uint64_t groups_per_block = block_elements / group;
  const uint64_t blocks_per_row = out.cols / block_elements, groups_per_row = out.cols / group;
  const uint64_t row_bytes = blocks_per_row * info.traits.block_bytes;
  const int bits = params->bits;
  const uint64_t words_per_row = out.cols * bits / 32;
  out.weight.assign(out.rows * words_per_row, 0);
  out.scales.resize(out.rows * groups_per_row);
  out.biases.resize(out.rows * groups_per_row);
  std::vector<uint8_t> q(block_elements);
  for (uint64_t r = 0; r < out.rows; ++r) {
    uint64_t src = row_order ? (*row_order)[r] : r;
    const uint8_t* row = data + src * row_bytes;
    uint32_t* words = out.weight.data() + r * words_per_row;
    for (uint64_t b = 0; b < blocks_per_row; ++b) {
      uint64_t first = r * groups_per_row + b * groups_per_block;
      decode_block(info.type(), row + b * info.traits.block_bytes, q.data(), &out.scales[first], &out.biases[first]);
      // A block fills exactly block_elements * bits / 32 words (32 elements: `bits` words): a
      // little-endian bit stream, element k at bit bits*k (3, 5 and 6 bits straddle words).
      uint32_t* w = words + b * block_elements * bits / 32;
      for (uint64_t k = 0; k < block_elements; ++k) {
        uint64_t at = bits * k, word = at / 32, shift = at % 32;
        w[word] |= static_cast<uint32_t>(q[k]) << shift;
        if (shift + bits > 32) w[word + 1] |= static_cast<uint32_t>(q[k]) >> (32 - shift);
      }
    }
  }
  return out;
}

Mxfp4Tensor repack_mxfp4(const GgufTensorInfo& info, const uint8_t* data) {
  if (info.type() != GgmlType::mxfp4)
    throw UnsupportedError("tensor '" + info.name + "' has type " + info.traits.name + ", not MXFP4");
  Mxfp4Tensor out;
  out.cols = info.dims[0];
  out.rows = info.rows();
  const uint64_t blocks = out.rows * out.cols / 32;
  out.weight.resize(blocks * 4);
  out.scales.resize(blocks);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = data + b * 17;
    if (block[0] == 255)
      throw UnsupportedError("tensor '" + info.name + "': MXFP4 block " + std::to_string(b) +
                             " has scale byte 255, which MX reserves for not-a-number");
    out.scales[b] = block[0];
    // Word w holds elements 8w..8w+7; element e < 16 is the low nibble of byte e, 16 + e the high.
    for (int w = 0; w < 4; ++w) {
      uint32_t word = 0;
      for (int k = 0; k < 8; ++k) {
        const int e = 8 * w + k;
        const uint32_t code = e < 16 ? block[1 + e] & 0x0F : block[1 + e - 16] >> 4;
        word |= code << (4 * k);
      }
      out.weight[4 * b + w] = word;
    }
  }
  return out;
}

bool has_exact_float32(GgmlType type) {
  switch (type) {
    case GgmlType::q2_k:
    case GgmlType::q3_k:
    case GgmlType::q6_k:
    case GgmlType::iq4_nl:
    case GgmlType::iq4_xs:
    case GgmlType::iq2_xxs:
    case GgmlType::iq2_xs:
    case GgmlType::iq2_s:
    case GgmlType::iq3_xxs:
    case GgmlType::iq3_s:
    case GgmlType::iq1_s:
    case GgmlType::iq1_m: return true;
    default: return false;
  }
}

namespace {

// Each block decoder writes the block's elements to y in llama.cpp's order, with its arithmetic:
// single float32 products and differences (no fused multiply-add), so every value is the one
// ggml's reference dequantisation computes.

// Q2_K (84 bytes / 256): 16 bytes of (4-bit scale | 4-bit min << 4) per 16 elements, 64 bytes of
// 2-bit quants, fp16 d and dmin; x = (d*sc)*q - dmin*m. Quant byte h*32+l holds, in bit pairs
// j = 0..3, elements h*128 + j*32 + l.
void q2_k_block(const uint8_t* block, float* y) {
  const uint8_t* sc = block;
  const uint8_t* qs = block + 16;
  const float d = half_to_float(load_u16(block + 80)), dmin = half_to_float(load_u16(block + 82));
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int q = (qs[h * 32 + l] >> (2 * j)) & 3;
    const float dl = d * static_cast<float>(sc[e / 16] & 0xF), ml = dmin * static_cast<float>(sc[e / 16] >> 4);
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K (110 bytes / 256): 32 bytes of high bits (element j*32+l at bit j of byte l), 64 bytes of
// low bit pairs (as Q2_K), 12 bytes of sixteen 6-bit scales, fp16 d; x = (d*(sc-32))*(q - 4*!hbit).
void q3_k_block(const uint8_t* block, float* y) {
  const uint8_t* hmask = block;
  const uint8_t* qs = block + 32;
  const uint8_t* packed = block + 96;
  const float d = half_to_float(load_u16(block + 108));
  int scales[16];
  for (int k = 0; k < 16; ++k) {
    const int low = (packed[k % 8] >> (4 * (k / 8))) & 0xF;
    const int high = (packed[8 + k % 4] >> (2 * (k / 4))) & 3;
    scales[k] = (low | (high << 4)) - 32;
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int low = (qs[h * 32 + l] >> (2 * j)) & 3;
    const int hbit = (hmask[l] >> (e / 32)) & 1;
    const float dl = d * static_cast<float>(scales[e / 16]);
    y[e] = dl * static_cast<float>(low - (hbit ? 0 : 4));
  }
}

// Q6_K (210 bytes / 256): ql[128] low nibbles, qh[64] two high bits, 16 int8 scales, fp16 d;
// x = (d*sc)*(q-32), at most 11+7+6 significant bits, exact in float32.
void q6_k_block(const uint8_t* block, float* y) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = half_to_float(load_u16(block + 208));
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128)
    for (int l = 0; l < 32; ++l) {
      int is = l / 16;
      int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
      int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
      int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
}

// The sixteen levels of the IQ4 formats' non-linear 4-bit grid (ggml's kvalues_iq4nl).
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// IQ4_NL (18 bytes / 32): fp16 d, 16 bytes of nibbles (element l < 16 the low nibble of byte l,
// element 16 + l its high nibble); x = d * level[q].
void iq4_nl_block(const uint8_t* block, float* y) {
  const float d = half_to_float(load_u16(block));
  const uint8_t* qs = block + 2;
  for (int e = 0; e < 32; ++e) y[e] = d * static_cast<float>(kIq4Levels[(qs[e % 16] >> (4 * (e / 16))) & 0xF]);
}

// IQ4_XS (136 bytes / 256): fp16 d, the high 2 bits of eight 6-bit scales in a u16, their low
// nibbles in 4 bytes, then 32-element sub-blocks laid out as IQ4_NL's; x = (d*(sc-32)) * level[q].
void iq4_xs_block(const uint8_t* block, float* y) {
  const float d = half_to_float(load_u16(block));
  const uint16_t scales_h = load_u16(block + 2);
  const uint8_t* scales_l = block + 4;
  const uint8_t* qs = block + 8;
  for (int k = 0; k < 8; ++k) {
    const int scale = (((scales_l[k / 2] >> (4 * (k % 2))) & 0xF) | (((scales_h >> (2 * k)) & 3) << 4)) - 32;
    const float dl = d * static_cast<float>(scale);
    for (int e = 0; e < 32; ++e)
      y[k * 32 + e] = dl * static_cast<float>(kIq4Levels[(qs[k * 16 + e % 16] >> (4 * (e / 16))) & 0xF]);
  }
}

// The IQ1..IQ3 formats: each group of 4 or 8 elements is one entry of a lattice grid (the tables
// of gguf_iq_tables.h), times a sub-block scale, with signs from a bit mask (IQ2/IQ3) or an offset
// of +-1/8 added (IQ1). The products are the single float32 operations of ggml's reference code.

uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
}

/** y[j] = db * grid[j], negated where bit j of `signs` is set, for n elements. */
template <typename T>
void signed_grid(float db, const T* grid, uint8_t signs, int n, float* y) {
  for (int j = 0; j < n; ++j) y[j] = db * static_cast<float>(grid[j]) * ((signs >> j) & 1 ? -1.0f : 1.0f);
}

// IQ2_XXS (66 bytes / 256): fp16 d, then per 32 elements two u32: four 8-bit grid indices, and
// four 7-bit sign indices with a 4-bit scale on top; db = d * (0.5 + scale) * 0.25.
void iq2_xxs_block(const uint8_t* block, float* y) {
  const float d = half_to_float(load_u16(block));
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint8_t* grid_index = block + 2 + 8 * ib;
    const uint32_t aux = load_u32(block + 2 + 8 * ib + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l)
      signed_grid(db, iq_tables::kIq2xxsGrid[grid_index[l]], iq_tables::kSigns[(aux >> (7 * l)) & 127], 8, y + 8 * l);
  }
}

// IQ2_XS (74 bytes / 256): fp16 d, 32 u16 (9-bit grid index, 7-bit sign index), then eight bytes
// of two 4-bit scales, one per 16 elements.
void iq2_xs_block(const uint8_t* block, float* y) {
  const float d = half_to_float(load_u16(block));
  const uint8_t* scales = block + 66;
  for (int ib = 0; ib < 8; ++ib, y += 32)
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = load_u16(block + 2 + 2 * (4 * ib + l));
      const int scale = (scales[ib] >> (4 * (l / 2))) & 0xF;
      const float db = d * (0.5f + static_cast<float>(scale)) * 0.25f;
      signed_grid(db, iq_tables::kIq2xsGrid[q & 511], iq_tables::kSigns[q >> 9], 8, y + 8 * l);
    }
}

// IQ2_S (82 bytes / 256): fp16 d, 32 low bytes of the 10-bit grid indices, 32 sign bytes, eight
// bytes of their high bit pairs, eight bytes of two 4-bit scales (as IQ2_XS).
void iq2_s_block(const uint8_t* block, float* y) {
  const float d = half_to_float(load_u16(block));
  const uint8_t* qs = block + 2;
  const uint8_t* signs = block + 34;
  const uint8_t* qh = block + 66;
  const uint8_t* scales = block + 74;
  for (int ib = 0; ib < 8; ++ib, y += 32)
    for (int l = 0; l < 4; ++l) {
      const int index = qs[4 * ib + l] | ((qh[ib] >> (2 * l)) & 3) << 8;
      const float db = d * (0.5f + static_cast<float>((scales[ib] >> (4 * (l / 2))) & 0xF)) * 0.25f;
      signed_grid(db, iq_tables::kIq2sGrid[index], signs[4 * ib + l], 8, y + 8 * l);
    }
}

// IQ3_XXS (98 bytes / 256): fp16 d, 64 8-bit indices into a grid of four values, then per 32
// elements a u32 of four 7-bit sign indices and a 4-bit scale; db = d * (0.5 + scale) * 0.5.
void iq3_xxs_block(const uint8_t* block, float* y) {
  const float d = half_to_float(load_u16(block));
  const uint8_t* qs = block + 2;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint32_t aux = load_u32(block + 66 + 4 * ib);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      const uint8_t sign = iq_tables::kSigns[(aux >> (7 * l)) & 127];
      signed_grid(db, iq_tables::kIq3xxsGrid[qs[8 * ib + 2 * l]], sign, 4, y + 8 * l);
      signed_grid(db, iq_tables::kIq3xxsGrid[qs[8 * ib + 2 * l + 1]], static_cast<uint8_t>(sign >> 4), 4, y + 8 * l + 4);
    }
  }
}

// IQ3_S (110 bytes / 256): fp16 d, 64 low bytes of 9-bit grid indices, 8 bytes of their high bits,
// 32 sign bytes, four bytes of two 4-bit scales (one per 32 elements); db = d * (1 + 2*scale).
void iq3_s_block(const uint8_t* block, float* y) {
  const float d = half_to_float(load_u16(block));
  const uint8_t* qs = block + 2;
  const uint8_t* qh = block + 66;
  const uint8_t* signs = block + 74;
  const uint8_t* scales = block + 106;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db = d * static_cast<float>(1 + 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 0xF));
    for (int g = 0; g < 8; ++g) {
      const int index = qs[8 * ib + g] | ((qh[ib] >> g) & 1) << 8;
      signed_grid(db, iq_tables::kIq3sGrid[index], static_cast<uint8_t>(signs[4 * ib + g / 2] >> (4 * (g % 2))), 4,
                  y + 4 * g);
    }
  }
}

/** y[j] = dl * (grid[j] + delta) for the 8 values of one IQ1 grid entry. */
void iq1_group(float dl, int index, bool minus, float* y) {
  const float delta = minus ? -iq_tables::kIq1Delta : iq_tables::kIq1Delta;
  for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(iq_tables::kIq1sGrid[index][j]) + delta);
}

// IQ1_S (50 bytes / 256): fp16 d, 32 low bytes of 11-bit grid indices, then per 32 elements a u16:
// four 3-bit high parts, a 3-bit scale and the delta's sign; dl = d * (2*scale + 1).
void iq1_s_block(const uint8_t* block, float* y) {
  const float d = half_to_float(load_u16(block));
  const uint8_t* qs = block + 2;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint16_t qh = load_u16(block + 34 + 2 * ib);
    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    for (int l = 0; l < 4; ++l) iq1_group(dl, qs[4 * ib + l] | ((qh >> (3 * l)) & 7) << 8, qh & 0x8000, y + 8 * l);
  }
}

// IQ1_M (56 bytes / 256): 32 low bytes of 11-bit grid indices, 16 bytes holding per 8 elements a
// 3-bit high part and the delta's sign, then four u16 of 3-bit scales (one per 16 elements) whose
// top nibbles together are the fp16 d.
void iq1_m_block(const uint8_t* block, float* y) {
  const uint8_t* qs = block;
  const uint8_t* qh = block + 32;
  uint16_t sc[4];
  for (int k = 0; k < 4; ++k) sc[k] = load_u16(block + 48 + 2 * k);
  const float d = half_to_float(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                                      ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
  for (int ib = 0; ib < 8; ++ib, y += 32)
    for (int l = 0; l < 4; ++l) {
      const int scale = (sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7;
      const float dl = d * static_cast<float>(2 * scale + 1);
      const uint8_t h = qh[2 * ib + l / 2] >> (4 * (l % 2));  // this group's nibble
      iq1_group(dl, qs[4 * ib + l] | (h & 7) << 8, h & 8, y + 8 * l);
    }
}

}  // namespace

std::vector<float> dequantize_float32(const GgufTensorInfo& info, const uint8_t* data,
                                      const std::vector<uint64_t>* row_order) {
  void (*decode)(const uint8_t*, float*) = nullptr;
  switch (info.type()) {
    case GgmlType::q2_k: decode = q2_k_block; break;
    case GgmlType::q3_k: decode = q3_k_block; break;
    case GgmlType::q6_k: decode = q6_k_block; break;
    case GgmlType::iq4_nl: decode = iq4_nl_block; break;
    case GgmlType::iq4_xs: decode = iq4_xs_block; break;
    case GgmlType::iq2_xxs: decode = iq2_xxs_block; break;
    case GgmlType::iq2_xs: decode = iq2_xs_block; break;
    case GgmlType::iq2_s: decode = iq2_s_block; break;
    case GgmlType::iq3_xxs: decode = iq3_xxs_block; break;
    case GgmlType::iq3_s: decode = iq3_s_block; break;
    case GgmlType::iq1_s: decode = iq1_s_block; break;
    case GgmlType::iq1_m: decode = iq1_m_block; break;
    default:
      throw UnsupportedError("tensor '" + info.name + "' has type " + info.traits.name +
                             ", which the converter cannot dequantise");
  }
  const uint64_t block_elements = info.traits.block_elements;
  const uint64_t cols = info.dims[0], rows = info.rows(), blocks_per_row = cols / block_elements;
  const uint64_t row_bytes = blocks_per_row * info.traits.block_bytes;
  std::vector<float> out(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint8_t* row = data + (row_order ? (*row_order)[r] : r) * row_bytes;
    for (uint64_t b = 0; b < blocks_per_row; ++b)
      decode(row + b * info.traits.block_bytes, out.data() + r * cols + b * block_elements);
  }
  return out;
}

std::vector<uint8_t> permute_plain_rows(const GgufTensorInfo& info, const uint8_t* data,
                                        const std::vector<uint64_t>& row_order) {
  // A 1-D tensor's rows are its elements (llama.cpp permutes q_proj.bias as it permutes q_proj.weight).
  const uint64_t row_bytes = info.dims.size() == 1 ? info.n_bytes / info.dims[0]
                                                   : info.dims[0] / info.traits.block_elements * info.traits.block_bytes;
  std::vector<uint8_t> out(info.n_bytes);
  for (uint64_t r = 0; r < row_order.size(); ++r)
    std::memcpy(out.data() + r * row_bytes, data + row_order[r] * row_bytes, row_bytes);
  return out;
}

std::string supported_gguf_types() {
  std::string kept, dense;
  for (uint32_t id = 0; id < 64; ++id) {
    auto traits = ggml_type_traits(id);
    if (!traits) continue;
    const auto type = static_cast<GgmlType>(id);
    const bool plain = type == GgmlType::f32 || type == GgmlType::f16 || type == GgmlType::bf16;
    std::string& list = has_exact_float32(type) ? dense : kept;
    if (plain || affine_params_for(type) || type == GgmlType::mxfp4 || has_exact_float32(type))
      list += (list.empty() ? "" : ", ") + std::string(traits->name);
  }
  return kept + "; " + dense + " stored as float32";
}

GgufTensorInfo slice_rows(const GgufTensorInfo& info, uint64_t begin, uint64_t count) {
  GgufTensorInfo part = info;
  if (info.dims.size() == 1) {
    if (info.traits.block_elements != 1 || begin + count > info.dims[0])
      throw UnsupportedError("tensor '" + info.name + "': cannot take elements " + std::to_string(begin) + ".." +
                             std::to_string(begin + count) + " of it");
    part.offset += begin * info.traits.block_bytes;
    part.dims[0] = count;
  } else {
    // Rows run over every leading dimension: rows of a [n, out, in] stack are its matrices' rows
    // in order, and a part is always 2-D.
    if (begin + count > info.rows())
      throw UnsupportedError("tensor '" + info.name + "': cannot take rows " + std::to_string(begin) + ".." +
                             std::to_string(begin + count) + " of it");
    part.offset += begin * (info.dims[0] / info.traits.block_elements * info.traits.block_bytes);
    part.dims = {info.dims[0], count};
  }
  part.n_elements = 1;
  for (auto d : part.dims) part.n_elements *= d;
  part.n_bytes = part.n_elements / info.traits.block_elements * info.traits.block_bytes;
  return part;
}

std::vector<uint64_t> unpermute_qk_rows(uint64_t rows, uint64_t heads) {
  std::vector<uint64_t> order(rows);
  const uint64_t head_dim = rows / heads, half = head_dim / 2;
  for (uint64_t h = 0; h < heads; ++h)
    for (uint64_t a = 0; a < 2; ++a)
      for (uint64_t j = 0; j < half; ++j) order[h * head_dim + a * half + j] = h * head_dim + 2 * j + a;
  return order;
}

}  // namespace mlxrt::convert
