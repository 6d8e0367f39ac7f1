// Post-processors: the special tokens HF adds around an encoded sequence (single sequences only:
// pairs are not part of this API).
#include "mlxrt/tokenizer/components.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::tokenizer::detail {
namespace {

class NoOp : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

// A template of special-token ids with one slot for the sequence.
class Template : public PostProcessor {
 public:
  Template(std::vector<int32_t> before, std::vector<int32_t> after) : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_, after_;
};

std::unique_ptr<PostProcessor> make_template(const json& spec, const std::string& where) {
  const json& single = field(spec, "single", where);
  if (!single.is_array()) throw ConfigError(where + ".single: must be a list");
  const json& specials = spec.contains("special_tokens") ? spec["special_tokens"] : json::object();
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    std::string at = where + ".single[" + std::to_string(i) + "]";
    const json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken"))
      throw ConfigError(at + ": expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    std::string name = string_field(item["SpecialToken"], "id", at + ".SpecialToken");
    if (!specials.is_object() || !specials.contains(name))
      throw ConfigError(at + ": special token '" + name + "' is not listed in " + where + ".special_tokens");
    const json& ids = field(specials[name], "ids", where + ".special_tokens['" + name + "']");
    if (!ids.is_array()) throw ConfigError(where + ".special_tokens['" + name + "'].ids: must be a list of ids");
    for (const json& id : ids) {
      if (!id.is_number_integer())
        throw ConfigError(where + ".special_tokens['" + name + "'].ids: must hold integers, got " + json_type_name(id));
      (seen_sequence ? after : before).push_back(id.get<int32_t>());
    }
  }
  return std::make_unique<Template>(std::move(before), std::move(after));
}

// RobertaProcessing / BertProcessing: cls + sequence + sep, each given as [token, id].
std::unique_ptr<PostProcessor> make_cls_sep(const json& spec, const std::string& where) {
  auto id_of = [&](const char* key) {
    const json& v = field(spec, key, where);
    if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer())
      throw ConfigError(where + "." + key + ": expected [token, id]");
    return v[1].get<int32_t>();
  };
  return std::make_unique<Template>(std::vector<int32_t>{id_of("cls")}, std::vector<int32_t>{id_of("sep")});
}

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  std::string type = type_of(spec, where);
  if (type == "TemplateProcessing") return make_template(spec, where);
  if (type == "RobertaProcessing" || type == "BertProcessing") return make_cls_sep(spec, where);
  if (type == "ByteLevel") return std::make_unique<NoOp>();  // it only trims offsets
  if (type == "Sequence") {
    const json& list = field(spec, "processors", where);
    if (!list.is_array()) throw ConfigError(where + ".processors: must be a list");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]");
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  throw ConfigError(where + ": unsupported post-processor type '" + type +
                    "' (supported: TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence)");
}

}  // namespace mlxrt::tokenizer::detail
