// The watch over a distributed run's peer connections (see peer_watch.h for why it exists).
#include "mlxrt/dist/peer_watch.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mlx/scheduler.h>
#include <mlx/stream.h>

namespace mlxrt::dist {

namespace {

namespace mx = mlx::core;

/** The descriptors open in this process: /proc/self/fd where there is one, else every number
 * below a bound (fstat tells the open ones apart). */
std::vector<int> open_descriptors() {
  std::vector<int> fds;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    try {
      fds.push_back(std::stoi(entry.path().filename().string()));
    } catch (const std::exception&) {
    }
  }
  if (!ec && !fds.empty()) return fds;
  fds.clear();
  const long bound = std::min<long>(::sysconf(_SC_OPEN_MAX), 4096);
  for (int fd = 0; fd < bound; ++fd) fds.push_back(fd);
  return fds;
}

bool same_object(const OpenSocket& a, const OpenSocket& b) {
  return a.fd == b.fd && a.device == b.device && a.inode == b.inode;
}

/** The probe sent down a stream: set when the stream reaches it. */
struct Probe {
  std::mutex mutex;
  std::condition_variable reached;
  bool done = false;
};

[[noreturn]] void end_stuck_rank() {
  std::fflush(stdout);
  const std::string message =
      "error: the connection to a peer of this distributed run was lost, and this rank's collectives wait on it "
      "(a rank of the distributed run stopped or cannot be reached; its own error, if any, is above)\n";
  // write(2), not stdio: the thread that holds stderr's lock may be the one that is stuck.
  const char* p = message.data();
  size_t left = message.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
  // No destructors: they would join the stuck stream's thread and hang again.
  std::_Exit(1);
}

}  // namespace

std::vector<OpenSocket> connected_stream_sockets() {
  std::vector<OpenSocket> sockets;
  for (int fd : open_descriptors()) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int type = 0;
    socklen_t len = sizeof(type);
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;  // a listener
    if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) continue;
    sockets.push_back({fd, st.st_dev, st.st_ino});
  }
  return sockets;
}

std::vector<OpenSocket> opened_between(const std::vector<OpenSocket>& before, const std::vector<OpenSocket>& after) {
  std::vector<OpenSocket> fresh;
  for (const auto& s : after)
    if (std::none_of(before.begin(), before.end(), [&](const OpenSocket& b) { return same_object(b, s); }))
      fresh.push_back(s);
  return fresh;
}

void wait_for_peer_data(const std::vector<OpenSocket>& peers, std::chrono::milliseconds at_most) {
  std::vector<pollfd> fds;
  for (const auto& s : peers) {
    struct stat st {};
    if (::fstat(s.fd, &st) == 0 && st.st_dev == s.device && st.st_ino == s.inode)
      fds.push_back({s.fd, POLLIN, 0});
  }
  if (fds.empty()) return;
  const auto deadline = std::chrono::steady_clock::now() + at_most;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    // Data, a hang-up or an error (POLLHUP and POLLERR always wake), or at_most passed.
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) >= 0 || errno != EINTR) return;
  }
}

PeerWatch::PeerWatch(std::vector<OpenSocket> peers, std::chrono::milliseconds stuck_after)
    : peers_(std::move(peers)), stuck_after_(stuck_after), thread_([this] { watch(); }) {}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool PeerWatch::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mutex_);
  return !wake_.wait_for(lock, d, [this] { return stop_; });
}

bool PeerWatch::a_peer_hung_up() const {
#ifdef POLLRDHUP
  constexpr short kHungUp = POLLRDHUP | POLLHUP | POLLERR;
#else
  constexpr short kHungUp = POLLHUP | POLLERR;
#endif
  for (const auto& s : peers_) {
    struct stat st {};
    if (::fstat(s.fd, &st) != 0 || st.st_dev != s.device || st.st_ino != s.inode) continue;  // closed by the backend
    pollfd p{s.fd, kHungUp, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & kHungUp)) return true;
  }
  return false;
}

bool PeerWatch::streams_drain() {
  std::vector<std::shared_ptr<Probe>> probes;
  for (const auto& stream : mx::get_streams()) {
    if (stream.device != mx::Device::cpu) continue;
    auto probe = std::make_shared<Probe>();
    mx::scheduler::enqueue(stream, [probe] {
      {
        std::lock_guard<std::mutex> lock(probe->mutex);
        probe->done = true;
      }
      probe->reached.notify_all();
    });
    probes.push_back(std::move(probe));
  }
  const auto deadline = std::chrono::steady_clock::now() + stuck_after_;
  for (const auto& probe : probes) {
    std::unique_lock<std::mutex> lock(probe->mutex);
    while (!probe->done) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      probe->reached.wait_for(lock, std::chrono::milliseconds(50));
      std::lock_guard<std::mutex> stop_lock(mutex_);
      if (stop_) return true;
    }
  }
  return true;
}

void PeerWatch::watch() {
  constexpr auto kTick = std::chrono::milliseconds(100);
  while (sleep_for(kTick)) {
    if (!a_peer_hung_up()) continue;
    // A peer is gone. Work that needs it can never finish; work that does not is left to end.
    if (!streams_drain()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
      }
      end_stuck_rank();
    }
  }
}

}  // namespace mlxrt::dist
