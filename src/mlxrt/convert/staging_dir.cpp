#include "mlxrt/convert/staging_dir.h"

#include <system_error>

#include "mlxrt/util/durable_file.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace fs = std::filesystem;

StagingDir::StagingDir(const fs::path& out, std::string flag, bool allow_empty)
    : out_(out.lexically_normal()), flag_(std::move(flag)) {
  if (!out_.has_filename()) out_ = out_.parent_path();  // "dir/" names "dir"
  if (out_.empty() || out_.filename() == "." || out_.filename() == "..")
    throw UsageError(flag_ + " " + out.string() + ": give the name of a new directory");
  std::error_code ec;
  if (fs::exists(out_, ec) && !(allow_empty && fs::is_directory(out_, ec) && fs::is_empty(out_, ec)))
    throw UsageError(allow_empty ? flag_ + " " + out_.string() + ": already exists and is not an empty directory"
                                 : flag_ + " " + out_.string() + ": cannot save to the path " + out_.string() +
                                       " as it already exists (delete it or give a new path)");
  fs::path parent = out_.has_parent_path() ? out_.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  util::remove_stale_partials(parent);
  path_ = util::partial_path(out_);
  fs::remove_all(path_, ec);
  if (!fs::create_directory(path_, ec))
    throw UsageError(flag_ + " " + out_.string() + ": cannot create a directory next to it (" + ec.message() + ")");
}

StagingDir::~StagingDir() {
  std::error_code ec;
  if (!committed_) fs::remove_all(path_, ec);
}

void StagingDir::commit() {
  std::error_code ec;
  if (fs::is_directory(out_, ec)) fs::remove(out_, ec);  // the empty directory checked above
  try {
    util::durable_rename(path_, out_);
  } catch (const std::system_error& e) {
    throw UsageError(flag_ + " " + out_.string() + ": cannot move the result into place (" + e.what() + ")");
  }
  committed_ = true;
}

}  // namespace mlxrt::convert
