// Port of huggingface_hub 2.4's utils/_cache_manager.py (scan_cache_dir, _scan_cached_repo,
// _format_size, delete_revisions + DeleteCacheStrategy.execute) and utils/_parsing.py's
// format_timesince, for mlx_lm/manage.py (mlx-lm 0.32.2). The shared blob store of newer caches
// (<cache>/blobs with its marker file) is skipped by the scan, as huggingface_hub skips it.
#include "mlxrt/io/hf_cache_scan.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "mlxrt/util/errors.h"

namespace fs = std::filesystem;

namespace mlxrt::io {

namespace {

/** A repo folder that is not a valid cache repo (huggingface_hub's CorruptedCacheException). */
struct Corrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool ignored_name(const std::string& name) {
  return name == ".DS_Store" || name == "Thumbs.db" || name == "desktop.ini";
}

struct Stat {
  uint64_t size = 0;
  double atime = 0, mtime = 0;
};

Stat stat_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) throw Corrupted("cannot stat " + p.string());
  return {static_cast<uint64_t>(st.st_size), double(st.st_atim.tv_sec) + double(st.st_atim.tv_nsec) * 1e-9,
          double(st.st_mtim.tv_sec) + double(st.st_mtim.tv_nsec) * 1e-9};
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/** Every non-directory entry under `dir`, recursively (pathlib's recursive glob, less directories). */
std::vector<fs::path> files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code e2;
    if (!fs::is_directory(it->path(), e2)) out.push_back(it->path());
  }
  return out;
}

bool shared_blob_store(const fs::path& p) {
  std::error_code ec;
  const fs::path marker = p / ".huggingface-shared-blobs";
  return fs::is_directory(p, ec) && fs::is_regular_file(marker, ec) && read_all(marker) == "1\n";
}

CachedRepo scan_repo(const fs::path& repo_path) {
  std::error_code ec;
  if (!fs::is_directory(repo_path, ec)) throw Corrupted("Repo path is not a directory: " + repo_path.string());
  const std::string name = repo_path.filename().string();
  const size_t sep = name.find("--");
  if (sep == std::string::npos)
    throw Corrupted("Repo path is not a valid HuggingFace cache directory: " + repo_path.string());
  static const std::map<std::string, std::string> kTypes = {
      {"datasets", "dataset"}, {"spaces", "space"}, {"models", "model"}, {"kernels", "kernel"}};
  auto type = kTypes.find(name.substr(0, sep));
  if (type == kTypes.end()) throw Corrupted("Repo type not recognised: " + repo_path.string());
  CachedRepo repo;
  repo.repo_type = type->second;
  repo.repo_id = name.substr(sep + 2);
  for (size_t p; (p = repo.repo_id.find("--")) != std::string::npos;) repo.repo_id.replace(p, 2, "/");
  repo.repo_path = repo_path;

  const fs::path snapshots = repo_path / "snapshots", refs = repo_path / "refs";
  if (!fs::is_directory(snapshots, ec))
    throw Corrupted("Snapshots dir doesn't exist in cached repo: " + snapshots.string());
  std::map<std::string, std::set<std::string>> refs_by_hash;
  if (fs::exists(refs, ec)) {
    if (fs::is_regular_file(refs, ec)) throw Corrupted("Refs directory cannot be a file: " + refs.string());
    for (const auto& ref : files_under(refs)) {
      if (ignored_name(ref.filename().string())) continue;
      refs_by_hash[read_all(ref)].insert(ref.lexically_relative(refs).generic_string());
    }
  }

  std::map<fs::path, Stat> blob_stats;
  for (const auto& entry : fs::directory_iterator(snapshots, ec)) {
    const fs::path revision_path = entry.path();
    if (ignored_name(revision_path.filename().string())) continue;
    if (fs::is_regular_file(revision_path, ec))
      throw Corrupted("Snapshots folder corrupted. Found a file: " + revision_path.string());
    CachedRevision rev;
    rev.commit_hash = revision_path.filename().string();
    rev.snapshot_path = revision_path;
    for (const auto& file : files_under(revision_path)) {
      // The first symlink hop, made absolute and normalised as os.path.abspath does.
      fs::path blob = fs::is_symlink(file, ec) ? (file.parent_path() / fs::read_symlink(file, ec)).lexically_normal()
                                               : file;
      if (!fs::exists(blob, ec)) throw Corrupted("Blob missing (broken symlink): " + blob.string());
      if (!blob_stats.count(blob)) blob_stats[blob] = stat_of(blob);
      rev.blob_paths.insert(blob);
    }
    if (auto it = refs_by_hash.find(rev.commit_hash); it != refs_by_hash.end()) {
      rev.refs = it->second;
      refs_by_hash.erase(it);
    }
    repo.revisions.push_back(std::move(rev));
  }
  if (!refs_by_hash.empty()) throw Corrupted("Reference(s) refer to missing commit hashes: " + repo_path.string());

  if (!blob_stats.empty()) {
    for (const auto& [path, st] : blob_stats) {
      repo.size_on_disk += st.size;
      repo.last_accessed = std::max(repo.last_accessed, st.atime);
      repo.last_modified = std::max(repo.last_modified, st.mtime);
    }
  } else {
    const Stat st = stat_of(repo_path);
    repo.last_accessed = st.atime;
    repo.last_modified = st.mtime;
  }
  repo.nb_files = blob_stats.size();
  return repo;
}

/** _try_delete_path: a file or link is unlinked, a folder removed whole; a missing one is skipped. */
void try_delete(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) || fs::is_symlink(path, ec)) fs::remove(path, ec);
  else fs::remove_all(path, ec);
}

}  // namespace

CacheScan scan_hf_cache(const fs::path& given) {
  std::error_code ec;
  fs::path cache_dir = fs::weakly_canonical(fs::absolute(given, ec), ec);
  if (!fs::exists(cache_dir, ec))
    throw ConfigError("Cache directory not found: " + cache_dir.string() +
                      ". Set HF_HUB_CACHE (or HF_HOME) to the Hugging Face cache, or download a model first "
                      "(huggingface-cli download org/name)");
  if (!fs::is_directory(cache_dir, ec))
    throw ConfigError("Scan cache expects a directory but found a file: " + cache_dir.string());
  CacheScan scan;
  scan.cache_dir = cache_dir;
  for (const auto& entry : fs::directory_iterator(cache_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (ignored_name(name) || name == ".locks" || name == "CACHEDIR.TAG") continue;
    if (name == "blobs" && shared_blob_store(entry.path())) continue;
    try {
      scan.repos.push_back(scan_repo(entry.path()));
    } catch (const Corrupted& e) {
      scan.warnings.push_back(e.what());
    } catch (const fs::filesystem_error& e) {
      scan.warnings.push_back(e.what());
    }
  }
  std::sort(scan.repos.begin(), scan.repos.end(),
            [](const CachedRepo& a, const CachedRepo& b) { return a.repo_path < b.repo_path; });
  return scan;
}

std::string format_cache_size(uint64_t bytes) {
  double num = double(bytes);
  char buf[64];
  for (const char* unit : {"", "K", "M", "G", "T", "P", "E", "Z"}) {
    if (std::abs(num) < 1000.0) {
      std::snprintf(buf, sizeof buf, "%.1f%s", num, unit);
      return buf;
    }
    num /= 1000.0;
  }
  std::snprintf(buf, sizeof buf, "%.1fY", num);
  return buf;
}

std::string format_timesince(double ts, double now) {
  const double delta = now - ts;
  if (delta < 20) return "a few seconds ago";
  struct Chunk {
    const char* label;
    double divider;
    long long max_value;  // < 0: none
  };
  static const Chunk kChunks[] = {{"second", 1, 59},          {"minute", 60, 59},
                                  {"hour", 3600, 23},         {"day", 86400, 6},
                                  {"week", 86400 * 7, 6},     {"month", 86400 * 30, 11},
                                  {"year", 86400 * 365, -1}};
  long long value = 0;
  const char* label = "";
  for (const auto& c : kChunks) {
    value = std::llrint(delta / c.divider);  // the default rounding mode: half to even, as round()
    label = c.label;
    if (c.max_value >= 0 && value <= c.max_value) break;
  }
  return std::to_string(value) + " " + label + (value > 1 ? "s" : "") + " ago";
}

void delete_cache_revisions(const CacheScan& scan, const std::set<std::string>& hashes) {
  std::set<fs::path> blobs, refs, repos, snapshots;
  for (const auto& repo : scan.repos) {
    std::vector<const CachedRevision*> doomed, others;
    for (const auto& rev : repo.revisions) (hashes.count(rev.commit_hash) ? doomed : others).push_back(&rev);
    if (doomed.empty()) continue;
    if (others.empty()) {
      repos.insert(repo.repo_path);
      continue;
    }
    std::set<fs::path> kept;
    for (const auto* rev : others) kept.insert(rev->blob_paths.begin(), rev->blob_paths.end());
    for (const auto* rev : doomed) {
      snapshots.insert(rev->snapshot_path);
      for (const auto& ref : rev->refs) refs.insert(repo.repo_path / "refs" / ref);
      for (const auto& blob : rev->blob_paths) {
        // A plain file inside the snapshot goes with the snapshot folder.
        const auto rel = blob.lexically_relative(rev->snapshot_path);
        if (!rel.empty() && *rel.begin() != "..") continue;
        if (!kept.count(blob)) blobs.insert(blob);
      }
    }
  }
  // huggingface_hub's order: repos, snapshots, refs, then blobs (a ref never names a missing
  // snapshot, a snapshot link never a missing blob).
  for (const auto& p : repos) try_delete(p);
  for (const auto& p : snapshots) try_delete(p);
  for (const auto& p : refs) try_delete(p);
  for (const auto& p : blobs) try_delete(p);
}

}  // namespace mlxrt::io
