#include "mlxrt/util/durable_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <vector>

namespace mlxrt::util {

namespace fs = std::filesystem;

namespace {

fs::path parent_of(const fs::path& p) {
  fs::path parent = p.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

/** The PID of a ".NAME.partial-PID[suffix]" name, or -1 when the name is not one. */
long partial_pid(const std::string& name) {
  if (name.size() < 2 || name[0] != '.') return -1;
  const std::string marker = ".partial-";
  auto at = name.rfind(marker);
  if (at == std::string::npos || at == 0) return -1;
  size_t i = at + marker.size();
  long pid = 0;
  size_t digits = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 10; ++i, ++digits)
    pid = pid * 10 + (name[i] - '0');
  if (digits == 0 || pid <= 0) return -1;
  if (i != name.size() && name[i] != '.') return -1;  // only a suffix such as ".safetensors" may follow
  return pid;
}

bool process_exists(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

}  // namespace

fs::path partial_path(const fs::path& target, const std::string& suffix) {
  fs::path t = target.lexically_normal();
  if (!t.has_filename()) t = t.parent_path();
  return parent_of(t) / ("." + t.filename().string() + ".partial-" + std::to_string(::getpid()) + suffix);
}

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), path.string() + ": cannot open to sync");
  int rc;
  do rc = ::fsync(fd);
  while (rc != 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  // Some file systems cannot sync a directory; that is no reason to fail the write.
  if (rc != 0 && !(err == EINVAL && fs::is_directory(path)))
    throw std::system_error(err, std::generic_category(), path.string() + ": cannot sync to disk");
}

void fsync_tree(const fs::path& dir) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_symlink()) continue;
    if (e.is_regular_file()) fsync_path(e.path());
    else if (e.is_directory()) dirs.push_back(e.path());
  }
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) fsync_path(*it);
  fsync_path(dir);
}

void durable_rename(const fs::path& from, const fs::path& to) {
  if (fs::is_directory(from)) fsync_tree(from);
  else fsync_path(from);
  fs::rename(from, to);  // throws filesystem_error (a system_error) naming both paths
  fsync_path(parent_of(to));
}

int remove_stale_partials(const fs::path& dir) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    long pid = partial_pid(it->path().filename().string());
    if (pid <= 0 || process_exists(pid)) continue;
    std::error_code rm;
    if (fs::remove_all(it->path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

}  // namespace mlxrt::util
