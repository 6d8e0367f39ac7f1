#include "mlxrt/convert/progress.h"

#include <unistd.h>

#include <cstdio>

namespace mlxrt::convert {

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0) {}

Progress::~Progress() {
  if (enabled_ && tty_ && drawn_) std::fputc('\n', stderr);
}

void Progress::update(uint64_t done, const std::string& detail) {
  if (!enabled_ || total_ == 0) return;
  int percent = static_cast<int>(done * 100 / total_);
  if (tty_) {
    constexpr int kWidth = 30;
    int filled = percent * kWidth / 100;
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::string shown = detail.size() > 40 ? detail.substr(0, 37) + "..." : detail;
    std::fprintf(stderr, "\r%s [%s] %3d%% %-40s", label_.c_str(), bar.c_str(), percent, shown.c_str());
    std::fflush(stderr);
    drawn_ = true;
  } else if (percent / 10 != last_percent_ / 10 || (percent == 100 && last_percent_ != 100)) {
    std::fprintf(stderr, "%s: %d%%\n", label_.c_str(), percent);
  }
  last_percent_ = percent;
}

}  // namespace mlxrt::convert
