// A real `drama serve` process for end-to-end tests: started with --port 0, its ready line parsed
// for the port, stopped with SIGTERM and its exit status collected. Its stderr (the request log)
// goes to a file so a failing test can show it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace drama::testing {

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// Runs a command to completion; returns its exit status (-1 if it could not start).
inline int run_command(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class ServerProcess {
 public:
  ServerProcess(const std::vector<std::string>& serve_args, const std::filesystem::path& log)
      : log_(log) {
    std::vector<std::string> args = {env_or("DRAMA_BIN", "drama"), "serve", "--port", "0"};
    args.insert(args.end(), serve_args.begin(), serve_args.end());
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int out[2];
    if (pipe(out) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
      pid_ = -1;
      close(out[0]);
      return;
    }
    stdout_fd_ = out[0];
    // Wait for "listening on http://HOST:PORT" (loading a checkpoint can take a while).
    std::string seen;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{stdout_fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) {
        if (exited()) break;
        continue;
      }
      char buf[512];
      ssize_t n = read(stdout_fd_, buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, size_t(n));
      auto at = seen.find("listening on http://");
      auto nl = at == std::string::npos ? at : seen.find('\n', at);
      if (nl != std::string::npos) {
        std::string addr = seen.substr(at + 20, nl - at - 20);
        port_ = std::atoi(addr.substr(addr.rfind(':') + 1).c_str());
        return;
      }
    }
  }

  ~ServerProcess() {
    if (pid_ > 0 && !exited()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_fd_ >= 0) close(stdout_fd_);
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool ready() const { return port_ > 0; }

  // SIGTERM, then waits (up to `timeout_s`) for the exit status; -1 if it had to be killed.
  int terminate(int timeout_s = 60) {
    if (pid_ <= 0) return -1;
    if (!exited()) kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!exited() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!exited()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return -1;
    }
    return exit_code_;
  }

  // Resident memory in KiB from /proc (0 if unknown).
  long rss_kib() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
    }
    return 0;
  }

  std::string log_text() const {
    std::ifstream f(log_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

 private:
  bool exited() {
    if (exit_seen_) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_seen_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return exit_seen_;
  }

  std::filesystem::path log_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  bool exit_seen_ = false;
  int exit_code_ = -1;
};

}  // namespace drama::testing
