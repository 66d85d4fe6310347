#include "watch/child.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <string_view>
#include <thread>

extern char** environ;

namespace saturate::watch {
namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
constexpr int kNumForwarded = sizeof(kForwarded) / sizeof(kForwarded[0]);

std::atomic<pid_t> g_forward_to{-1};
struct sigaction g_previous[kNumForwarded];

void Forward(int sig, siginfo_t* info, void*) {
  // The terminal signals the whole foreground process group, child included.
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  const pid_t pid = g_forward_to.load();
  if (pid > 0) kill(pid, sig);
}

void InstallForwarding(pid_t pid) {
  g_forward_to.store(pid);
  struct sigaction sa = {};
  sa.sa_sigaction = Forward;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kNumForwarded; ++i) sigaction(kForwarded[i], &sa, &g_previous[i]);
}

void RemoveForwarding() {
  for (int i = 0; i < kNumForwarded; ++i) sigaction(kForwarded[i], &g_previous[i], nullptr);
  g_forward_to.store(-1);
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// saturate's environment with `extra` set on top (replacing same names).
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced =
        std::any_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : extra) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Result<Child> Child::Spawn(const std::vector<std::string>& argv, const ChildOptions& options) {
  if (argv.empty() || argv[0].empty()) return Status::InvalidArgument("no command to run");
  std::vector<char*> args = CStrings(argv);
  const std::vector<std::string> env_strings = ChildEnvironment(options.env);
  std::vector<char*> env = CStrings(env_strings);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (options.output_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, options.output_fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, options.output_fd, STDERR_FILENO);
  }
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return rc == ENOENT ? Status::NotFound(argv[0] + ": command not found")
                        : Status::FromErrno("cannot run " + argv[0], rc);
  }
  if (options.forward_signals) InstallForwarding(pid);
  return Child(pid, options.forward_signals);
}

Child::Child(Child&& other) noexcept
    : pid_(other.pid_), forwarding_(other.forwarding_), exit_code_(other.exit_code_) {
  other.pid_ = -1;
  other.forwarding_ = false;
}

Child::~Child() {
  if (pid_ > 0 && !exit_code_) {
    kill(pid_, SIGKILL);
    (void)Reap(/*block=*/true);
  }
  if (forwarding_) RemoveForwarding();
}

Result<std::optional<int>> Child::Reap(bool block) {
  if (exit_code_) return exit_code_;
  if (pid_ <= 0) return Status::InvalidArgument("no child process");
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (r == pid_) {
      exit_code_ = ExitCode(status);
      return exit_code_;
    }
    if (r == 0) return std::optional<int>();
    if (errno != EINTR) return Status::FromErrno("waitpid", errno);
  }
}

Result<int> Child::Wait() {
  SATURATE_ASSIGN_OR_RETURN(std::optional<int> code, Reap(/*block=*/true));
  return *code;
}

Result<std::optional<int>> Child::Poll() { return Reap(/*block=*/false); }

Result<int> Child::Terminate(int64_t grace_ns) {
  SATURATE_ASSIGN_OR_RETURN(std::optional<int> code, Reap(/*block=*/false));
  if (code) return *code;
  kill(pid_, SIGTERM);
  // Poll rather than block: a child that ignores SIGTERM must not hang us.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(grace_ns);
  while (std::chrono::steady_clock::now() < deadline) {
    SATURATE_ASSIGN_OR_RETURN(code, Reap(/*block=*/false));
    if (code) return *code;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  return Wait();
}

}  // namespace saturate::watch
