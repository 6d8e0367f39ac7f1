#pragma once
/** Locating a model: a plain directory or a Hugging Face cache snapshot, and its identity. */
#include <filesystem>
#include <optional>
#include <string>

namespace mlxrt::io {

/** Resolves a user-given model path: an existing directory holding config.json, or an HF cache
 * repo folder (`models--org--name`, whose refs/main names the snapshot). Throws ConfigError
 * naming the path when it is missing or holds no config.json. */
std::filesystem::path resolve_model_dir(const std::filesystem::path& given);

/** `hf:org/name@sha` when `dir` is an HF cache snapshot (`.../models--org--name/snapshots/<sha>`),
 * else nullopt: an arbitrary local directory has no content identity. Only the path's tail is
 * read, so relocating the cache does not change the fingerprint. */
std::optional<std::string> external_artifact_fingerprint(const std::filesystem::path& dir);

}  // namespace mlxrt::io
