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
#include <memory>
#include <mutex>
#include <optional>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "mlxrt/util/errors.h"

extern char** environ;

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
  int stdin_fd = -1;  // the write end of the rank's stdin pipe (owned by the StdinCopy)
  bool running = false;
};

// Starts one rank. Everything the child needs is built before fork: between fork and exec the child
// of a process with threads may only make async-signal-safe calls.
pid_t spawn(const LaunchOptions& o, const std::vector<std::string>& rank_env, int rank, int& stdin_fd) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const auto key = kv.substr(0, kv.find('='));
    const bool replaced = std::any_of(rank_env.begin(), rank_env.end(),
                                      [&](const std::string& r) { return r.compare(0, key.size() + 1, key + "=") == 0; });
    if (!replaced) env_text.push_back(kv);
  }
  env_text.insert(env_text.end(), rank_env.begin(), rank_env.end());
  std::vector<char*> envp, argv;
  for (auto& kv : env_text) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::string program = o.program;
  std::vector<std::string> args = o.args;
  argv.push_back(program.data());
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const char* null_path = "/dev/null";

  // Both ends close on exec: a rank must not hold another rank's stdin open (it would never end).
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error("mlxrt launch: cannot create a pipe for rank " + std::to_string(rank));
  const pid_t pid = ::fork();
  if (pid < 0) throw Error("mlxrt launch: cannot start rank " + std::to_string(rank));
  if (pid == 0) {
#ifdef __linux__
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a launcher that is killed takes its ranks with it
#endif
    ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores it; the rank gets the default back
    ::dup2(pipe_fds[0], STDIN_FILENO);  // dup2 clears close-on-exec on the copy
    if (rank != 0) {
      const int null_fd = ::open(null_path, O_WRONLY);
      if (null_fd >= 0) ::dup2(null_fd, STDOUT_FILENO);
    }
    ::execve(program.c_str(), argv.data(), envp.data());
    static const char msg[] = "mlxrt launch: cannot run the rank's program\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(pipe_fds[0]);
  stdin_fd = pipe_fds[1];
  return pid;
}

/** Copies this process's stdin to every rank's, on a thread of its own that may outlive the run
 * (a read from a terminal cannot be interrupted): what it uses is shared, not on the launcher's stack. */
struct StdinCopy {
  std::mutex mutex;
  std::vector<int> fds;  // the write ends; -1 once closed
  void close_all() {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& fd : fds)
      if (fd >= 0) ::close(fd), fd = -1;
  }
};

void start_stdin_copy(std::shared_ptr<StdinCopy> copy) {
  std::thread([copy] {
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n <= 0) break;
      std::lock_guard<std::mutex> lock(copy->mutex);
      bool any = false;
      for (auto& fd : copy->fds) {
        if (fd >= 0 && ::write(fd, buf, static_cast<size_t>(n)) < 0) ::close(fd), fd = -1;
        any = any || fd >= 0;
      }
      if (!any) return;
    }
    copy->close_all();  // end of input: every rank sees it
  }).detach();
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
  std::optional<Hostfile> hostfile;
  if (o.backend == Backend::ring) hostfile.emplace(o.ranks);
  const int nccl_port = o.backend == Backend::nccl ? free_port() : 0;
  std::vector<Rank> ranks(o.ranks);
  auto copy = std::make_shared<StdinCopy>();
  for (int r = 0; r < o.ranks; ++r) {
    ranks[r].pid = spawn(o, rank_environment(o, r, hostfile ? hostfile->path() : "", nccl_port), r, ranks[r].stdin_fd);
    ranks[r].running = true;
    copy->fds.push_back(ranks[r].stdin_fd);
  }
  start_stdin_copy(copy);

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
      // One write: the ranks share this stderr, and a line written in pieces interleaves with theirs.
      const std::string line = "mlxrt launch: rank " + std::to_string(failed) + " " + describe(failed_status) +
                               "; stopping the other ranks\n";
      std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
      std::cerr.flush();
      for (auto& other : ranks)
        if (other.running) ::kill(other.pid, SIGTERM);
      stop_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(o.grace_seconds * 1000));
    }
    if (first_failure >= 0 && std::chrono::steady_clock::now() > stop_at)
      for (auto& other : ranks)
        if (other.running) ::kill(other.pid, SIGKILL);
  }
  copy->close_all();
  return result;
}

}  // namespace mlxrt::dist
