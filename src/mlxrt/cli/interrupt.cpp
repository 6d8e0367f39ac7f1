#include "mlxrt/cli/interrupt.h"

#include <atomic>

namespace mlxrt::cli {

namespace {

// The one piece of state a signal handler may touch: lock-free, written only by the handler and
// cleared by InterruptGuard::take.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint(int) { g_interrupted.store(true, std::memory_order_relaxed); }

}  // namespace

InterruptGuard::InterruptGuard() {
  g_interrupted.store(false);
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a read waiting for the next line returns EINTR
  sigaction(SIGINT, &action, &previous_);
}

InterruptGuard::~InterruptGuard() { sigaction(SIGINT, &previous_, nullptr); }

bool InterruptGuard::take() { return g_interrupted.exchange(false); }

}  // namespace mlxrt::cli
