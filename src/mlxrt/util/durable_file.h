#pragma once
/** Atomic, durable replacement of files and directories: write under a temporary name next to the
 * target, fsync what was written, rename(2) it into place, then fsync the parent directory so the
 * rename itself survives a crash. Temporary names carry the writer's process id
 * (".NAME.partial-PID"), so a later run can tell the leftovers of a killed writer from the work
 * of one still running. */
#include <filesystem>
#include <string>

namespace mlxrt::util {

/** ".NAME.partial-PID" (plus `suffix`) in the directory of `target`, for this process. */
std::filesystem::path partial_path(const std::filesystem::path& target, const std::string& suffix = "");

/** fsync(2) of a file or directory; throws std::system_error naming the path. */
void fsync_path(const std::filesystem::path& path);

/** fsync of every regular file under `dir` (recursively), then of each directory, `dir` last. */
void fsync_tree(const std::filesystem::path& dir);

/** Renames `from` (a file or a finished directory) onto `to` after syncing its contents, then syncs
 * the parent directory of `to`. Throws std::system_error on failure; `from` is left in place. */
void durable_rename(const std::filesystem::path& from, const std::filesystem::path& to);

/** Removes the ".NAME.partial-PID[...]" entries of `dir` whose process no longer exists (a killed
 * writer's leftovers). Entries of running processes, and every other name, are kept. Returns the
 * number removed; errors are ignored (this is housekeeping). */
int remove_stale_partials(const std::filesystem::path& dir);

}  // namespace mlxrt::util
