// Port of the offline path of huggingface_hub 2.4's snapshot_download (local_files_only=True),
// its cache constants (constants.HF_HUB_CACHE) and validate_repo_id, as mlx_lm.utils._download
// (mlx-lm 0.32.2) uses them: an existing local path wins, otherwise the repo id is looked up.
#include "mlxrt/io/hf_cache.h"

#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

#include "mlxrt/util/errors.h"

namespace fs = std::filesystem;

namespace mlxrt::io {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

/** os.path.expanduser: a leading "~" or "~user" becomes that home directory. */
std::string expand_user(const std::string& p) {
  if (p.empty() || p[0] != '~') return p;
  size_t slash = p.find('/');
  std::string user = p.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  std::string home;
  if (user.empty()) {
    if (const char* h = env("HOME")) home = h;
    else if (const passwd* pw = getpwuid(getuid())) home = pw->pw_dir;
  } else if (const passwd* pw = getpwnam(user.c_str())) {
    home = pw->pw_dir;
  }
  if (home.empty()) return p;
  while (home.size() > 1 && home.back() == '/') home.pop_back();
  return home + (slash == std::string::npos ? std::string() : p.substr(slash));
}

bool is_var_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/** os.path.expandvars (posixpath): $name and ${name} are replaced when set, left as they are when not. */
std::string expand_vars(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p[i] != '$') {
      out += p[i++];
      continue;
    }
    size_t start = i + 1, end = start;
    bool braced = start < p.size() && p[start] == '{';
    std::string name;
    if (braced) {
      size_t close = p.find('}', start + 1);
      if (close == std::string::npos) {
        out += p[i++];
        continue;
      }
      name = p.substr(start + 1, close - start - 1);
      end = close + 1;
    } else {
      while (end < p.size() && is_var_char(p[end])) ++end;
      name = p.substr(start, end - start);
    }
    const char* value = name.empty() ? nullptr : std::getenv(name.c_str());
    if (!value) {
      out += p[i++];
      continue;
    }
    out += value;
    i = end;
  }
  return out;
}

fs::path expand(const std::string& p) { return expand_vars(expand_user(p)); }

bool is_commit_hash(std::string_view s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

/** One part of a repo id by huggingface_hub's REPO_ID_REGEX: 1..96 of [A-Za-z0-9_.-], starting and
 * ending with a word character. */
bool valid_repo_part(std::string_view part) {
  if (part.empty() || part.size() > 96) return false;
  for (char c : part)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  return word(part.front()) && word(part.back());
}

bool valid_repo_id(std::string_view id) {
  if (id.find("--") != std::string_view::npos || id.find("..") != std::string_view::npos) return false;
  if (id.size() >= 4 && id.substr(id.size() - 4) == ".git") return false;
  size_t slash = id.find('/');
  if (slash == std::string_view::npos) return valid_repo_part(id);
  if (id.find('/', slash + 1) != std::string_view::npos) return false;
  return valid_repo_part(id.substr(0, slash)) && valid_repo_part(id.substr(slash + 1));
}

/** A branch or tag name that stays inside refs/: relative, no empty, "." or ".." component. */
bool safe_revision(std::string_view rev) {
  if (rev.empty() || rev.front() == '/' || rev.find('\\') != std::string_view::npos ||
      rev.find('\0') != std::string_view::npos)
    return false;
  size_t pos = 0;
  while (pos <= rev.size()) {
    size_t slash = rev.find('/', pos);
    std::string_view part = rev.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  return true;
}

std::string how_to_get(const HfRepoRef& ref) {
  std::string args = "download " + ref.repo_id;
  if (ref.revision != "main") args += " --revision " + ref.revision;
  return "; download it with `hf " + args + "` (`huggingface-cli " + args +
         "` with huggingface_hub before 1.0), or pass a local model directory";
}

}  // namespace

HfCacheDir hf_hub_cache_dir() {
  if (const char* v = env("HF_HUB_CACHE")) return {expand(v), "HF_HUB_CACHE"};
  if (const char* v = env("HUGGINGFACE_HUB_CACHE")) return {expand(v), "HUGGINGFACE_HUB_CACHE"};
  if (const char* v = env("HF_HOME")) return {expand(v) / "hub", "HF_HOME"};
  if (const char* v = env("XDG_CACHE_HOME")) return {expand(std::string(v) + "/huggingface") / "hub", "XDG_CACHE_HOME"};
  return {expand("~/.cache/huggingface") / "hub", "the default"};
}

std::optional<HfRepoRef> parse_hf_repo_ref(std::string_view text, std::string_view flag) {
  HfRepoRef ref;
  size_t at = text.find('@');
  ref.repo_id = std::string(text.substr(0, at));
  ref.revision = at == std::string_view::npos ? "main" : std::string(text.substr(at + 1));
  if (!valid_repo_id(ref.repo_id)) return std::nullopt;
  if (!safe_revision(ref.revision))
    throw UsageError(std::string(flag) + " " + std::string(text) + ": revision '" + ref.revision +
                     "' is not a branch, tag or commit name (expected org/name@revision, the revision " +
                     "relative, without empty, '.' or '..' parts)");
  return ref;
}

std::string hf_repo_folder_name(const std::string& repo_id) {
  std::string name = "models";
  std::istringstream parts(repo_id);
  for (std::string part; std::getline(parts, part, '/');) name += "--" + part;
  return name;
}

fs::path hf_cache_snapshot(const HfCacheDir& cache, const HfRepoRef& ref, std::string_view flag) {
  const std::string what = std::string(flag) + " " + ref.repo_id +
                           (ref.revision == "main" ? std::string() : "@" + ref.revision);
  const fs::path repo = cache.path / hf_repo_folder_name(ref.repo_id);
  const std::string where = " (Hugging Face cache " + cache.path.string() + ", from " + cache.source + ")";
  std::error_code ec;
  if (!fs::is_directory(repo, ec))
    throw ConfigError(what + ": not a local directory, and not in the Hugging Face cache: " + repo.string() +
                      " does not exist" + where + how_to_get(ref));
  std::string sha = ref.revision;
  if (!is_commit_hash(sha)) {
    const fs::path ref_file = repo / "refs" / ref.revision;
    std::ifstream in(ref_file, std::ios::binary);
    if (!in || fs::is_directory(ref_file, ec))
      throw ConfigError(what + ": revision '" + ref.revision + "' is not in the Hugging Face cache: " +
                        ref_file.string() + " does not exist" + where + how_to_get(ref));
    std::ostringstream content;
    content << in.rdbuf();
    sha = content.str();
    // huggingface_hub writes the hash without a newline; one added by hand is tolerated.
    while (!sha.empty() && (sha.back() == '\n' || sha.back() == '\r' || sha.back() == ' ')) sha.pop_back();
    if (!is_commit_hash(sha))
      throw ConfigError(ref_file.string() + ": expected a 40-character lowercase hex commit hash, got '" +
                        sha.substr(0, 80) + "'" + where);
  }
  const fs::path snapshot = repo / "snapshots" / sha;
  if (!fs::is_directory(snapshot, ec))
    throw ConfigError(what + ": snapshot " + sha + " is not in the Hugging Face cache: " + snapshot.string() +
                      " does not exist" + where + how_to_get(ref));
  return snapshot;
}

fs::path resolve_path_or_hf_repo(const std::string& given, std::string_view flag) {
  std::error_code ec;
  if (given.empty()) throw UsageError(std::string(flag) + ": no model path given");
  if (fs::exists(given, ec)) return given;
  std::optional<HfRepoRef> ref;
  // An absolute or explicitly relative path is never a repo id.
  if (given.front() != '/' && given.rfind("./", 0) != 0 && given.rfind("../", 0) != 0 && given.front() != '~')
    ref = parse_hf_repo_ref(given, flag);
  if (!ref)
    throw ConfigError(given + ": model directory does not exist (" + std::string(flag) +
                      " takes a local directory or a Hugging Face repo id org/name[@revision])");
  return hf_cache_snapshot(hf_hub_cache_dir(), *ref, flag);
}

}  // namespace mlxrt::io
