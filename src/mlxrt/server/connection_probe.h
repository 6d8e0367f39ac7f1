#pragma once
/** Whether the client of a request has gone away, asked while the request is being served.
 *
 * cpp-httplib does not give handlers their socket, so the probe finds it: the socket whose local
 * and peer addresses are the request's (unique while the connection is open). It then checks
 * without reading: a peer that has closed or reset its side shows as hang-up / end of stream. */
#include <string>
#include <vector>

namespace mlxrt::server {

/** The process's open descriptors: from /proc/self/fd or /dev/fd (the directory's own descriptor
 * left out), else every number below the descriptor limit. */
std::vector<int> open_descriptors();

class ConnectionProbe {
 public:
  /** Finds the connection (remote address/port as the request records them, local port). An
   * unknown connection gives a probe that never reports a disconnect. */
  ConnectionProbe(const std::string& remote_addr, int remote_port, int local_port);

  bool found() const { return fd_ >= 0; }
  /** True once the peer has closed or reset the connection. */
  bool client_gone() const;

 private:
  int fd_ = -1;
};

}  // namespace mlxrt::server
