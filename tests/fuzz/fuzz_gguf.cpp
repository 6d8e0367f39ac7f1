// Arbitrary bytes as a whole GGUF file: the parser must accept or throw WeightsError, never
// crash, hang, over-allocate or read out of bounds; what it accepts must then turn into a model
// config, tensor plans, dequantised or repacked blocks and tokenizer files, or a typed
// mlxrt::Error (the converter's steps that need no MLX).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/convert/gguf_blocks.h"
#include "mlxrt/convert/gguf_file.h"
#include "mlxrt/convert/gguf_tokenizer.h"
#include "mlxrt/util/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mlxrt::convert;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  GgufFile file;
  try {
    file = parse_gguf(bytes, size, "fuzz.gguf");
  } catch (const mlxrt::WeightsError&) {
    return 0;
  }
  for (const auto& t : file.tensors)  // validation promised these
    if (file.data_start + t.offset + t.n_bytes > size || t.dims.empty()) __builtin_trap();
  try {
    const auto& arch = find_architecture(file);
    (void)build_model_config(arch, file, data + file.data_start);
    for (const auto& t : file.tensors) (void)plan_tensor(arch, file, t);
  } catch (const mlxrt::Error&) {
  }
  // The block decoders over what validation accepted (small tensors only: the output is float32).
  for (const auto& t : file.tensors) {
    if (t.n_elements > (1u << 16) || t.dims.size() < 2) continue;
    const uint8_t* bytes_at = data + file.data_start + t.offset;
    try {
      if (has_exact_float32(t.type())) (void)dequantize_float32(t, bytes_at);
      else if (affine_params_for(t.type())) (void)repack_affine(t, bytes_at);
      else if (t.type() == GgmlType::mxfp4) (void)repack_mxfp4(t, bytes_at);
    } catch (const mlxrt::Error&) {
    }
  }
  try {
    if (has_tokenizer(file)) (void)build_tokenizer_files(file);
  } catch (const mlxrt::Error&) {
  }
  return 0;
}
