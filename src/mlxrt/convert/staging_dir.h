#pragma once
/** The output directory of a conversion, written in a hidden sibling first (".NAME.partial-PID");
 * when complete, every file is synced to disk, the folder is renamed into place and the parent
 * directory is synced, so a crash or kill never leaves a half-written checkpoint under the final
 * name. It is removed if anything fails; the leftovers of a killed run (a partial folder whose
 * process is gone) are removed at the next run into the same parent directory. */
#include <filesystem>
#include <string>

namespace mlxrt::convert {

class StagingDir {
 public:
  /** `flag` names the option in errors. An existing `out` is refused unless `allow_empty` and it
   * is an empty directory. */
  StagingDir(const std::filesystem::path& out, std::string flag, bool allow_empty = true);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void commit();

 private:
  std::filesystem::path out_, path_;
  std::string flag_;
  bool committed_ = false;
};

}  // namespace mlxrt::convert
