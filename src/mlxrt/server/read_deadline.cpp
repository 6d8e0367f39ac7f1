#include "mlxrt/server/read_deadline.h"

#include "mlxrt/server/connection_probe.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <set>
#include <string_view>

namespace mlxrt::server {

namespace {

using Clock = std::chrono::steady_clock;

/** 0 (none) for anything not positive; at most a billion seconds, which the clock can still add. */
Clock::duration seconds(double s) {
  if (!(s > 0)) return Clock::duration::zero();
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(s, 1e9)));
}

/** A quarter of the shortest deadline, within [50 ms, 500 ms]: deadlines hold to within a tick. */
Clock::duration tick_for(Clock::duration header, Clock::duration body) {
  Clock::duration shortest = std::chrono::milliseconds(2000);
  for (Clock::duration d : {header, body})
    if (d > Clock::duration::zero()) shortest = std::min(shortest, d);
  return std::clamp<Clock::duration>(shortest / 4, std::chrono::milliseconds(50), std::chrono::milliseconds(500));
}

/** The peer of an accepted socket on `local_port`, its address spelled as httplib spells
 * Request::remote_addr (getnameinfo, numeric); nothing for any other descriptor. */
std::optional<std::pair<std::string, int>> peer_of(int fd, int local_port) {
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return std::nullopt;
  int port = sa.ss_family == AF_INET    ? ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port)
             : sa.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port)
                                        : -1;
  if (port != local_port) return std::nullopt;
  len = sizeof(sa);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return std::nullopt;  // the listener
  port = sa.ss_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port)
                                 : ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port);
  std::array<char, NI_MAXHOST> host{};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&sa), len, host.data(), host.size(), nullptr, 0, NI_NUMERICHOST))
    return std::nullopt;
  return std::pair<std::string, int>(host.data(), port);
}

/** A descriptor of our own for a connection's socket, closed when it goes out of scope: whatever
 * happens to the original meanwhile (closed by its thread, its number reused), this one stays the
 * socket that was checked. */
class OwnDescriptor {
 public:
  explicit OwnDescriptor(int fd) : fd_(fcntl(fd, F_DUPFD_CLOEXEC, 0)), error_(fd_ < 0 ? errno : 0) {}
  ~OwnDescriptor() {
    if (fd_ >= 0) close(fd_);
  }
  OwnDescriptor(const OwnDescriptor&) = delete;
  OwnDescriptor& operator=(const OwnDescriptor&) = delete;
  /** -1 when the duplicate failed (error() says why). */
  int fd() const { return fd_; }
  int error() const { return error_; }
  /** Whether it is still the accepted socket of `peer` on `local_port`. */
  bool is_peer(const std::pair<std::string, int>& peer, int local_port) const {
    return fd_ >= 0 && peer_of(fd_, local_port) == std::optional<std::pair<std::string, int>>(peer);
  }

 private:
  int fd_;
  int error_;
};

}  // namespace

ReadDeadline::ReadDeadline(int local_port, double header_timeout_s, double body_timeout_s,
                           std::string body_timeout_reply, std::function<void(ReadPhase)> on_timeout)
    : local_port_(local_port),
      header_timeout_(seconds(header_timeout_s)),
      body_timeout_(seconds(body_timeout_s)),
      tick_(tick_for(header_timeout_, body_timeout_)),
      body_timeout_reply_(std::move(body_timeout_reply)),
      on_timeout_(std::move(on_timeout)),
      last_scan_(Clock::now()) {
  watchdog_ = std::thread([this] { watch(); });
}

ReadDeadline::~ReadDeadline() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
}

void ReadDeadline::mark(const std::string& peer_addr, int peer_port, ReadPhase phase) {
  // With mutex_ held. A connection the watchdog has not seen yet is entered without its fd.
  Connection& c = connections_[{peer_addr, peer_port}];
  c.phase = phase;
  c.since = c.touched = Clock::now();
  c.cut = false;
}

void ReadDeadline::headers_read(const std::string& peer_addr, int peer_port) {
  std::lock_guard lock(mutex_);
  mark(peer_addr, peer_port, ReadPhase::body);
}

void ReadDeadline::handling(const std::string& peer_addr, int peer_port) {
  std::lock_guard lock(mutex_);
  mark(peer_addr, peer_port, ReadPhase::handling);
}

bool ReadDeadline::answered(const std::string& peer_addr, int peer_port) {
  std::lock_guard lock(mutex_);
  auto it = connections_.find({peer_addr, peer_port});
  bool was_cut = it != connections_.end() && it->second.cut;
  mark(peer_addr, peer_port, ReadPhase::headers);  // the next request's headers, from now
  return was_cut;
}

void ReadDeadline::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    // The scan runs unlocked (a system call or two per descriptor): requests report meanwhile.
    Clock::time_point start = Clock::now();
    std::vector<Socket> sockets;
    for (int fd : open_descriptors())
      if (auto peer = peer_of(fd, local_port_)) sockets.push_back({fd, std::move(*peer)});
    lock.lock();
    update(sockets, start);
    std::vector<ReadPhase> cut = cut_late(Clock::now());
    lock.unlock();
    for (ReadPhase phase : cut) on_timeout_(phase);
    lock.lock();
    cv_.wait_for(lock, tick_, [this] { return stopping_; });
  }
}

void ReadDeadline::update(const std::vector<Socket>& sockets, Clock::time_point scan_start) {
  std::set<Peer> seen;
  for (const Socket& s : sockets) {
    seen.insert(s.peer);
    auto [it, fresh] = connections_.try_emplace(s.peer);
    Connection& c = it->second;
    if (fresh) {
      c.since = c.touched = scan_start;  // accepted since the last scan: its headers are due
    } else if (c.fd >= 0 && c.fd != s.fd && c.touched < last_scan_) {
      // Another descriptor for the same peer and no report since the last scan: the connection
      // closed and the peer opened a new one. (A report since then may be the new one's.)
      c = Connection{};
      c.since = c.touched = scan_start;
    }
    c.fd = s.fd;
  }
  // Gone: not found, and not reported since the scan began (a report may precede the sighting).
  for (auto it = connections_.begin(); it != connections_.end();)
    it = !seen.count(it->first) && it->second.touched < scan_start ? connections_.erase(it) : std::next(it);
  last_scan_ = scan_start;
}

std::vector<ReadPhase> ReadDeadline::cut_late(Clock::time_point now) {
  std::vector<ReadPhase> cut;
  for (auto it = connections_.begin(); it != connections_.end();) {
    Connection& c = it->second;
    Clock::duration limit = c.phase == ReadPhase::headers ? header_timeout_
                            : c.phase == ReadPhase::body  ? body_timeout_
                                                          : Clock::duration::zero();
    if (c.cut || c.fd < 0 || limit == Clock::duration::zero() || now - c.since <= limit ||
        (c.phase == ReadPhase::headers && header_block_waiting(c.fd, it->first))) {
      ++it;
      continue;
    }
    Cut result = shut_down(c.fd, it->first, c.phase == ReadPhase::body);
    if (result == Cut::gone) {
      it = connections_.erase(it);
      continue;
    }
    if (result == Cut::done) {
      c.cut = true;
      cut.push_back(c.phase);
    }
    ++it;
  }
  return cut;
}

bool ReadDeadline::header_block_waiting(int fd, const Peer& peer) const {
  OwnDescriptor own(fd);
  if (!own.is_peer(peer, local_port_)) return false;
  // Up to 64 KiB: a header block larger than that (httplib allows a few) is judged by its start
  // and cut as if it were still arriving, which only a pathological client would notice.
  std::vector<char> buffer(64 * 1024);
  ssize_t n = recv(own.fd(), buffer.data(), buffer.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n <= 0) return false;
  std::string_view seen(buffer.data(), static_cast<size_t>(n));
  return seen.find("\r\n\r\n") != std::string_view::npos || seen.find("\n\n") != std::string_view::npos;
}

ReadDeadline::Cut ReadDeadline::shut_down(int fd, const Peer& peer, bool reply) const {
  OwnDescriptor own(fd);
  if (own.fd() < 0) return own.error() == EBADF ? Cut::gone : Cut::retry;
  if (!own.is_peer(peer, local_port_)) return Cut::gone;
  if (reply && !body_timeout_reply_.empty()) {
    int flags = MSG_DONTWAIT;
#ifdef MSG_NOSIGNAL
    flags |= MSG_NOSIGNAL;
#endif
    // Best effort: the client is sending, not reading; a full buffer just loses the reply.
    (void)send(own.fd(), body_timeout_reply_.data(), body_timeout_reply_.size(), flags);
  }
  ::shutdown(own.fd(), SHUT_RDWR);  // wakes the thread reading it; httplib then closes it
  return Cut::done;
}

}  // namespace mlxrt::server
