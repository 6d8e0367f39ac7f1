#pragma once
/** What is in the local Hugging Face hub cache, and deleting revisions from it: huggingface_hub's
 * scan_cache_dir and HFCacheInfo.delete_revisions(...).execute(), which mlx_lm.manage prints and
 * calls. */
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace mlxrt::io {

struct CachedRevision {
  std::string commit_hash;              // the snapshot folder's name
  std::filesystem::path snapshot_path;
  std::set<std::string> refs;           // refs/<name> files holding this hash ("main", "refs/pr/1")
  std::set<std::filesystem::path> blob_paths;  // the first symlink hop of each file (or the file itself)
};

struct CachedRepo {
  std::string repo_id;    // "org/name"
  std::string repo_type;  // "model", "dataset", "space", "kernel"
  std::filesystem::path repo_path;
  uint64_t size_on_disk = 0;  // the sum of its distinct blobs' sizes
  size_t nb_files = 0;        // its distinct blobs
  double last_accessed = 0;   // newest blob atime (the repo folder's when it has none), seconds
  double last_modified = 0;   // newest blob mtime (idem)
  std::vector<CachedRevision> revisions;
};

struct CacheScan {
  std::filesystem::path cache_dir;   // resolved
  std::vector<CachedRepo> repos;     // sorted by repo_path
  std::vector<std::string> warnings; // a repo folder that is not a valid cache repo, and why
};

/** scan_cache_dir(cache_dir): every valid repo folder; an invalid one becomes a warning instead.
 * Throws ConfigError when `cache_dir` does not exist or is a file. */
CacheScan scan_hf_cache(const std::filesystem::path& cache_dir);

/** huggingface_hub's _format_size: 1000-based, one decimal, "42.2K". */
std::string format_cache_size(uint64_t bytes);

/** huggingface_hub's format_timesince for `ts` seen at `now` (seconds): "a few seconds ago",
 * "3 days ago", with Python's round (half to even). */
std::string format_timesince(double ts, double now);

/** HFCacheInfo.delete_revisions(*hashes).execute() on the scan as it was taken: a repo losing all
 * its revisions is removed whole; otherwise the revisions' snapshots, their refs, and blobs no
 * other revision of the scan uses. */
void delete_cache_revisions(const CacheScan& scan, const std::set<std::string>& hashes);

}  // namespace mlxrt::io
