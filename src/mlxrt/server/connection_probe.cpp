#include "mlxrt/server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace mlxrt::server {

namespace {

bool address_of(const sockaddr_storage& sa, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(sa);
    inet_ntop(AF_INET, &in.sin_addr, buf, sizeof(buf));
    port = ntohs(in.sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(sa);
    inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof(buf));
    port = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

bool matches(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage peer{}, local{};
  socklen_t len = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return false;
  len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return false;
  std::string paddr, laddr;
  int pport = -1, lport = -1;
  if (!address_of(peer, paddr, pport) || !address_of(local, laddr, lport)) return false;
  return pport == remote_port && lport == local_port && paddr == remote_addr;
}

}  // namespace

std::vector<int> open_descriptors() {
  std::vector<int> fds;
  for (const char* dir : {"/proc/self/fd", "/dev/fd"}) {
    DIR* d = opendir(dir);
    if (!d) continue;
    while (dirent* e = readdir(d))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && std::atoi(e->d_name) != dirfd(d))
        fds.push_back(std::atoi(e->d_name));
    closedir(d);
    return fds;
  }
  rlimit lim{};
  int top = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536 ? static_cast<int>(lim.rlim_cur) : 65536;
  for (int fd = 0; fd < top; ++fd) fds.push_back(fd);
  return fds;
}

ConnectionProbe::ConnectionProbe(const std::string& remote_addr, int remote_port, int local_port) {
  for (int fd : open_descriptors()) {
    if (matches(fd, remote_addr, remote_port, local_port)) {
      fd_ = fd;
      return;
    }
  }
}

bool ConnectionProbe::client_gone() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
#ifdef POLLRDHUP
  p.events |= POLLRDHUP;
#endif
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
#ifdef POLLRDHUP
  if (p.revents & POLLRDHUP) return true;
#endif
  if (p.revents & POLLIN) {
    // Readable: either more bytes from the client (a pipelined request: still there) or EOF.
    char c;
    return recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

}  // namespace mlxrt::server
