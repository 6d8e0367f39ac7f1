#pragma once
/** The local Hugging Face hub cache, read offline the way huggingface_hub's snapshot_download
 * (local_files_only=True) reads it: <cache>/models--org--name/{refs/<revision>, snapshots/<sha>/,
 * blobs/}. Nothing here touches the network. */
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace mlxrt::io {

/** The hub cache directory and the setting it came from ("HF_HUB_CACHE", "HF_HOME", ...). */
struct HfCacheDir {
  std::filesystem::path path;
  std::string source;
};

/** huggingface_hub's constants.HF_HUB_CACHE: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else
 * $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub, with `~` and
 * `$VAR` expanded as os.path.expanduser/expandvars do. */
HfCacheDir hf_hub_cache_dir();

/** A repo id with an optional revision: "org/name@v1" -> {"org/name", "v1"}; revision "main"
 * when none is given. */
struct HfRepoRef {
  std::string repo_id;
  std::string revision;
};

/** Parses `org/name[@revision]` (or `name[@revision]`). nullopt when the text is not a repo id
 * by huggingface_hub's rules (validate_repo_id: ASCII letters, digits, '-', '_', '.', at most one
 * '/', no "--" or "..", not starting or ending with '-' or '.', not ending in ".git", at most 96
 * characters a part). Throws UsageError naming `flag` when the id is valid but the revision could
 * escape the cache (empty, absolute, a "." or ".." component, a backslash). */
std::optional<HfRepoRef> parse_hf_repo_ref(std::string_view text, std::string_view flag);

/** "models--org--name": the repo's folder inside the cache (huggingface_hub's repo_folder_name). */
std::string hf_repo_folder_name(const std::string& repo_id);

/** The snapshot directory of `ref` in `cache`: a 40-hex revision names snapshots/<rev> directly,
 * any other revision is read from refs/<revision>, whose content must be a 40-hex commit hash.
 * The returned path is not canonicalised (its files stay symlinks into blobs/, followed on open).
 * Throws ConfigError saying where it looked and how to get the model when it is not there. */
std::filesystem::path hf_cache_snapshot(const HfCacheDir& cache, const HfRepoRef& ref, std::string_view flag);

/** The one resolver for every flag or field that names a model or adapter (--model,
 * --draft-model, --adapter-path, the server's request "model"), as mlx_lm.utils._download does
 * offline: an existing local path wins and is returned as given; otherwise `org/name[@revision]`
 * is resolved in the hub cache (hf_hub_cache_dir) to its snapshot directory. Throws ConfigError
 * (the message starts with `flag` and `given`) when it is neither, saying where it looked and how
 * to get it (`huggingface-cli download org/name`, or a local directory). */
std::filesystem::path resolve_path_or_hf_repo(const std::string& given, std::string_view flag = "--model");

}  // namespace mlxrt::io
