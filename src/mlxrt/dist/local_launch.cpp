// A local mlx.launch (mlx/_distributed_utils/launch.py, mlx 0.32.4) for runs on one machine: the same
// per-rank environment, free ports chosen instead of a fixed starting port (so that two runs do not
// collide), and a supervisor that stops the run when a rank fails.
#include "mlxrt/dist/local_launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "mlxrt/util/errors.h"

namespace mlxrt::dist {

namespace {

// A port the kernel reports free now (bound to port 0, then released). Another process could take
// it before the rank listens; the run then fails to connect and says so.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error("mlxrt launch: cannot open a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw Error("mlxrt launch: cannot find a free local port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

/** The ring hostfile, removed when the run ends. */
class Hostfile {
 public:
  explicit Hostfile(int ranks) {
    std::vector<int> ports;
    while (static_cast<int>(ports.size()) < ranks) {
      const int p = free_port();
      if (std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
    }
    std::string json = "[";
    for (int r = 0; r < ranks; ++r) json += std::string(r ? ", " : "") + "[\"127.0.0.1:" + std::to_string(ports[r]) + "\"]";
    json += "]";
    char tmpl[] = "/tmp/mlxrt-hostfile-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) throw Error("mlxrt launch: cannot create the ring hostfile");
    path_ = tmpl;
    const std::string text = json + "\n";
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!ok) throw Error("mlxrt launch: cannot write the ring hostfile " + path_);
  }
  ~Hostfile() { std::filesystem::remove(path_); }
  Hostfile(const Hostfile&) = delete;
  Hostfile& operator=(const Hostfile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::string> rank_environment(const LaunchOptions& o, int rank, const std::string& hostfile, int nccl_port) {
  std::vector<std::string> env = {"MLX_RANK=" + std::to_string(rank)};
  if (o.backend == Backend::ring) env.push_back("MLX_HOSTFILE=" + hostfile);
  if (o.backend == Backend::nccl) {
    env.push_back("MLX_WORLD_SIZE=" + std::to_string(o.ranks));
    env.push_back("NCCL_HOST_IP=127.0.0.1");
    env.push_back("NCCL_PORT=" + std::to_string(nccl_port));
    env.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(rank));
  }
  return env;
}

struct Rank {
  pid_t pid = -1;
  int stdin_fd = -1;  // the write end of the rank's stdin pipe
  bool running = false;
  int status = 0;
};

pid_t spawn(const LaunchOptions& o, const std::vector<std::string>& env, int rank, int& stdin_fd) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw Error("mlxrt launch: cannot create a pipe for rank " + std::to_string(rank));
  const pid_t pid = ::fork();
  if (pid < 0) throw Error("mlxrt launch: cannot start rank " + std::to_string(rank));
  if (pid == 0) {
#ifdef __linux__
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a launcher that is killed takes its ranks with it
#endif
    ::dup2(pipe_fds[0], STDIN_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    if (rank != 0) {
      const int null_fd = ::open("/dev/null", O_WRONLY);
      if (null_fd >= 0) ::dup2(null_fd, STDOUT_FILENO);
    }
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(o.program.c_str()));
    for (const auto& a : o.args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(o.program.c_str(), argv.data());
    std::fprintf(stderr, "mlxrt launch: cannot run %s: %s\n", o.program.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipe_fds[0]);
  stdin_fd = pipe_fds[1];
  return pid;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with code " + std::to_string(exit_code(status));
}

}  // namespace

int launch_local(const LaunchOptions& o) {
  if (o.ranks < 1) throw UsageError("mlxrt launch: -n must be at least 1");
  if (o.backend != Backend::ring && o.backend != Backend::nccl)
    throw UsageError(std::string("mlxrt launch: --backend ") + backend_name(o.backend) +
                     " is not started by mlxrt launch (it starts ring and nccl runs; use mlx.launch or mpirun)");
  ::signal(SIGPIPE, SIG_IGN);  // a rank that closed its stdin must not stop the launcher
  Hostfile hostfile(o.backend == Backend::ring ? o.ranks : 0);
  const int nccl_port = o.backend == Backend::nccl ? free_port() : 0;
  std::vector<Rank> ranks(o.ranks);
  for (int r = 0; r < o.ranks; ++r) {
    ranks[r].pid = spawn(o, rank_environment(o, r, hostfile.path(), nccl_port), r, ranks[r].stdin_fd);
    ranks[r].running = true;
  }
  // stdin to every rank (mlx.launch broadcasts its input); the pipes close when our stdin ends.
  std::atomic<bool> done{false};
  std::thread feeder([&] {
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n <= 0 || done) break;
      for (auto& rk : ranks)
        if (rk.stdin_fd >= 0 && ::write(rk.stdin_fd, buf, static_cast<size_t>(n)) < 0) {
          ::close(rk.stdin_fd);
          rk.stdin_fd = -1;
        }
    }
    for (auto& rk : ranks)
      if (rk.stdin_fd >= 0) ::close(rk.stdin_fd), rk.stdin_fd = -1;
  });
  feeder.detach();  // it may block on a terminal read; the process exits without waiting for it

  int first_failure = -1, result = 0;
  std::chrono::steady_clock::time_point stop_at{};
  for (int alive = o.ranks; alive > 0;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // The ranks that ended since the last look. Of several failures seen together, one killed by
    // a signal is named: the others most likely failed because their peer vanished.
    int failed = -1, failed_status = 0;
    for (int r = 0; r < o.ranks; ++r) {
      if (!ranks[r].running) continue;
      int status = 0;
      if (::waitpid(ranks[r].pid, &status, WNOHANG) != ranks[r].pid) continue;
      ranks[r].running = false;
      --alive;
      if (exit_code(status) != 0 && (failed < 0 || (WIFSIGNALED(status) && !WIFSIGNALED(failed_status))))
        failed = r, failed_status = status;
    }
    if (failed >= 0 && first_failure < 0) {
      first_failure = failed;
      result = exit_code(failed_status);
      std::cerr << "mlxrt launch: rank " << failed << " " << describe(failed_status) << "; stopping the other ranks"
                << std::endl;
      for (auto& other : ranks)
        if (other.running) ::kill(other.pid, SIGTERM);
      stop_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(o.grace_seconds * 1000));
    }
    if (first_failure >= 0 && std::chrono::steady_clock::now() > stop_at)
      for (auto& other : ranks)
        if (other.running) ::kill(other.pid, SIGKILL);
  }
  done = true;
  return result;
}

}  // namespace mlxrt::dist
