// SentencePiece tokenizer.model files through libsentencepiece (no tokenizer.json beside them).
#include <sentencepiece_processor.h>

#include "mlxrt/tokenizer/tokenizer_impl.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::tokenizer::detail {
namespace {

class Backend : public SentencePieceBackend {
 public:
  explicit Backend(const std::filesystem::path& path) {
    auto status = sp_.Load(path.string());
    if (!status.ok())
      throw ConfigError(path.string() + ": not a SentencePiece model: " + status.ToString());
  }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    auto status = sp_.Encode(text, &ids);
    if (!status.ok()) throw ConfigError("SentencePiece encode failed: " + status.ToString());
    return {ids.begin(), ids.end()};
  }
  // Control tokens (<s>, </s>) decode to nothing in SentencePiece; written as their piece text
  // unless skipped, as transformers' slow tokenizer shows them.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string text;
      if (sp_.Decode(run, &text).ok()) out += text;
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= sp_.GetPieceSize()) continue;
      if (sp_.IsControl(id)) {
        flush();
        if (!skip_special) out += sp_.IdToPiece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }
  std::optional<int32_t> piece_to_id(std::string_view piece) const override {
    int id = sp_.PieceToId(std::string(piece));
    if (id == sp_.unk_id() && piece != sp_.IdToPiece(id)) return std::nullopt;
    return id;
  }
  std::string id_to_piece(int32_t id) const override {
    return id >= 0 && id < sp_.GetPieceSize() ? sp_.IdToPiece(id) : std::string();
  }
  size_t size() const override { return static_cast<size_t>(sp_.GetPieceSize()); }
  bool is_control(int32_t id) const override {
    return id >= 0 && id < sp_.GetPieceSize() && (sp_.IsControl(id) || sp_.IsUnknown(id));
  }
  std::optional<int32_t> bos_id() const override { return sp_.bos_id() >= 0 ? std::optional<int32_t>(sp_.bos_id()) : std::nullopt; }
  std::optional<int32_t> eos_id() const override { return sp_.eos_id() >= 0 ? std::optional<int32_t>(sp_.eos_id()) : std::nullopt; }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<SentencePieceBackend> load_sentencepiece(const std::filesystem::path& path) {
  return std::make_unique<Backend>(path);
}

}  // namespace mlxrt::tokenizer::detail
