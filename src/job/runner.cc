#include "job/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/file.h"
#include "job/steps.h"
#include "saturate/watch/watcher.h"
#include "watch/child.h"

namespace saturate::job {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kTick = std::chrono::milliseconds(20);
constexpr auto kStepPoll = std::chrono::milliseconds(250);
constexpr size_t kTailBytes = 16384;

// SIGINT/SIGTERM while watching without a command: stop, record, exit 130.
std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal.store(sig); }

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    struct sigaction sa = {};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &previous_int_);
    sigaction(SIGTERM, &sa, &previous_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  bool stopped() const { return g_stop_signal.load() != 0; }

 private:
  struct sigaction previous_int_ = {}, previous_term_ = {};
};

// The command's combined output, read from a pipe: to output.log, the
// observer and a tail kept for failure reports.
class OutputCapture {
 public:
  OutputCapture(int fd, const std::string& log_path, std::function<void(std::string_view)> observer)
      : fd_(fd), log_(log_path, std::ios::binary), observer_(std::move(observer)) {}
  ~OutputCapture() { close(fd_); }
  OutputCapture(const OutputCapture&) = delete;
  OutputCapture& operator=(const OutputCapture&) = delete;

  // Reads what is in the pipe now; false once at end of file.
  bool Drain() {
    char buf[8192];
    while (open_) {
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n > 0) {
        Add(std::string_view(buf, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      open_ = false;
    }
    return open_;
  }

  // The last `max_lines` non-empty lines.
  std::vector<std::string> Tail(size_t max_lines) {
    log_.flush();
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < tail_.size()) {
      size_t nl = tail_.find('\n', start);
      if (nl == std::string::npos) nl = tail_.size();
      if (nl > start) lines.push_back(tail_.substr(start, nl - start));
      start = nl + 1;
    }
    if (lines.size() > max_lines) {
      lines.erase(lines.begin(), lines.end() - static_cast<long>(max_lines));
    }
    return lines;
  }

 private:
  void Add(std::string_view chunk) {
    log_.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (observer_) observer_(chunk);
    tail_.append(chunk);
    if (tail_.size() > kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
  }

  int fd_;
  bool open_ = true;
  std::ofstream log_;
  std::function<void(std::string_view)> observer_;
  std::string tail_;
};

}  // namespace

class Job::Impl {
 public:
  explicit Impl(JobOptions options) : o_(std::move(options)) {}

  Status Begin() {
    if (!o_.argv.empty() && o_.pid != 0) {
      return Status::InvalidArgument("give either a pid or a command to run, not both");
    }
    if (o_.capture_output && o_.run_dir.empty()) {
      return Status::InvalidArgument("capturing the output needs a run directory");
    }
    pid_ = o_.pid;
    if (!o_.argv.empty()) SATURATE_RETURN_IF_ERROR(SpawnCommand());
    watch::WatchOptions wo;
    wo.interval_ns = o_.interval_ns;
    wo.run_dir = SamplesDir();
    wo.pid = pid_;
    wo.command = o_.argv;
    wo.gpus = o_.gpus && (!o_.rank || o_.rank->local_rank == 0);
    wo.nvml_library = o_.nvml_library;
    wo.auto_instrument = auto_instrumented_;
    wo.job_labels = o_.job_labels;
    wo.job_gpus = o_.job_gpus;
    SATURATE_ASSIGN_OR_RETURN(watcher_, watch::Watcher::Start(wo));
    return Status::OK();
  }

  Result<JobResult> Run(const std::function<void()>& on_tick) {
    if (ran_) return Status::Internal("Job::Run called twice");
    ran_ = true;
    std::optional<StopSignals> stop_signals;
    if (!child_) stop_signals.emplace();
    JobResult result;
    const auto start = Clock::now();
    const auto deadline = o_.time_budget_ns > 0
                              ? start + std::chrono::nanoseconds(o_.time_budget_ns)
                              : Clock::time_point::max();
    auto next_step_count = start;
    bool open = output_ != nullptr;
    while (true) {
      if (open) open = output_->Drain();
      if (child_) {
        SATURATE_ASSIGN_OR_RETURN(std::optional<int> code, child_->Poll());
        if (code) {
          result.exit_code = *code;
          result.ended_by = "exit";
          break;
        }
      } else if (stop_signals->stopped()) {
        result.exit_code = 128 + SIGINT;
        result.ended_by = "signal";
        break;
      } else if (pid_ > 0 && kill(pid_, 0) != 0 && errno == ESRCH) {
        result.ended_by = "exit";
        break;
      }
      const auto now = Clock::now();
      std::string over;
      if (now >= deadline) over = "time";
      if (over.empty() && o_.step_budget > 0 && !o_.run_dir.empty() && now >= next_step_count) {
        next_step_count = now + kStepPoll;
        if (CountStepMarks(o_.run_dir).steps() >= o_.step_budget) over = "steps";
      }
      if (!over.empty()) {
        if (child_) {
          SATURATE_ASSIGN_OR_RETURN(result.exit_code, child_->Terminate(o_.grace_ns));
        }
        result.ended_by = over;
        break;
      }
      if (on_tick) on_tick();
      std::this_thread::sleep_for(kTick);
    }
    // What the command wrote before it ended; a grandchild holding the pipe
    // open must not keep us here.
    for (int i = 0; i < 10 && open; ++i) {
      open = output_->Drain();
      if (open) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    result.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    SATURATE_RETURN_IF_ERROR(
        watcher_->Stop(child_ ? std::optional<int>(result.exit_code) : std::nullopt));
    if (o_.rank && child_ && !o_.run_dir.empty()) SATURATE_RETURN_IF_ERROR(WriteTask(result));
    if (output_) {
      result.output_tail = output_->Tail(o_.tail_lines);
      output_.reset();
    }
    // Ctrl-C reached the command (it shares our terminal): the user wants out.
    result.cancelled = result.ended_by == "signal" ||
                       (child_ && result.ended_by == "exit" && result.exit_code == 128 + SIGINT);
    return result;
  }

  const watch::Watcher& watcher() const { return *watcher_; }
  int pid() const { return pid_; }
  bool auto_instrumented() const { return auto_instrumented_; }

 private:
  Status SpawnCommand() {
    watch::ChildOptions co;
    if (!o_.run_dir.empty()) {
      std::error_code ec;
      fs::create_directories(OwnDir(), ec);
      if (ec) return Status::IOError("cannot create " + OwnDir() + ": " + ec.message());
      if (o_.auto_instrument) {
        SATURATE_ASSIGN_OR_RETURN(
            EnvVars bootstrap,
            WriteBootstrap(o_.bootstrap_dir.empty() ? OwnDir() + "/.auto" : o_.bootstrap_dir));
        co.env = std::move(bootstrap);
        auto_instrumented_ = true;
      }
      co.env.emplace_back("SATURATE_RUN_DIR", fs::absolute(o_.run_dir).lexically_normal());
    }
    // Turned off on purpose: also for a bootstrap an outer saturate put on PYTHONPATH.
    if (!o_.auto_instrument) co.env.emplace_back("SATURATE_AUTO", "0");
    for (const auto& kv : o_.env) co.env.push_back(kv);
    int pipe_fds[2] = {-1, -1};
    if (o_.capture_output) {
      if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
      co.output_fd = pipe_fds[1];
    }
    Result<watch::Child> child = watch::Child::Spawn(o_.argv, co);
    if (o_.capture_output) {
      close(pipe_fds[1]);
      if (!child.ok()) close(pipe_fds[0]);
    }
    if (!child.ok()) return child.status();
    pid_ = child->pid();
    child_.emplace(std::move(child).value());
    if (o_.capture_output) {
      fcntl(pipe_fds[0], F_SETFL, fcntl(pipe_fds[0], F_GETFL) | O_NONBLOCK);
      output_ =
          std::make_unique<OutputCapture>(pipe_fds[0], OwnDir() + "/output.log", o_.on_output);
    }
    return Status::OK();
  }

  // Where this saturate writes what is its own: RUN_DIR, or RUN_DIR/rank-<r>
  // when it runs as one rank of a job (ranks never share a file).
  std::string OwnDir() const { return base::RankRunDir(o_.run_dir, o_.rank); }

  // Where the Watcher records: RUN_DIR, or for a rank RUN_DIR/node-<host> on
  // local rank 0 and nowhere on the others.
  std::string SamplesDir() const {
    if (!o_.rank || o_.run_dir.empty()) return o_.run_dir;
    if (o_.rank->local_rank != 0) return "";
    return o_.run_dir + "/node-" + o_.rank->host;
  }

  // RUN_DIR/rank-<r>/task.json: how this rank's command ended (docs/ranks.md).
  Status WriteTask(const JobResult& result) const {
    const nlohmann::json task = {{"rank", o_.rank->rank},
                                 {"local_rank", o_.rank->local_rank},
                                 {"world_size", o_.rank->world_size},
                                 {"host", o_.rank->host},
                                 {"launcher", o_.rank->launcher},
                                 {"pid", pid_},
                                 {"command", o_.argv},
                                 {"exit_code", result.exit_code},
                                 {"ended_by", result.ended_by},
                                 {"wall_s", result.wall_s}};
    return WriteFileAtomic(OwnDir() + "/task.json", task.dump(2) + "\n");
  }

  JobOptions o_;
  int pid_ = 0;
  bool auto_instrumented_ = false;
  bool ran_ = false;
  std::optional<watch::Child> child_;
  std::unique_ptr<OutputCapture> output_;
  std::unique_ptr<watch::Watcher> watcher_;
};

Job::Job(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Job::~Job() = default;

Result<std::unique_ptr<Job>> Job::Start(JobOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  SATURATE_RETURN_IF_ERROR(impl->Begin());
  return std::unique_ptr<Job>(new Job(std::move(impl)));
}

Result<JobResult> Job::Run(const std::function<void()>& on_tick) { return impl_->Run(on_tick); }
const watch::Watcher& Job::watcher() const { return impl_->watcher(); }
int Job::pid() const { return impl_->pid(); }
bool Job::auto_instrumented() const { return impl_->auto_instrumented(); }

Result<JobResult> RunJob(JobOptions options, const std::function<void()>& on_tick) {
  SATURATE_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, Job::Start(std::move(options)));
  return job->Run(on_tick);
}

}  // namespace saturate::job
