#pragma once
/** Ctrl-C as a request rather than a kill, for the interactive verbs. */
#include <csignal>

namespace mlxrt::cli {

/** While alive, SIGINT only records that it came (the process keeps running) and interrupts a
 * blocking read of stdin (the handler is installed without SA_RESTART); the previous disposition
 * is restored on destruction. One at a time. */
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  /** Whether a Ctrl-C came since the last call (the record is cleared). */
  bool take();

 private:
  struct sigaction previous_ {};
};

}  // namespace mlxrt::cli
