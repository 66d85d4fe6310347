// The span recorder: per-thread buffers drained by one writer thread into
// RUN_DIR/spans-<pid>.jsonl (format: docs/trace.md).
//
// Locks, always taken in this order:
//   control_mu  serializes Start / Stop / Flush / the lazy start and the
//               restart after fork(); held while joining the writer.
//   mu          the buffer list, the orphans, the file and the writer's state.
//   buffer.mu   one thread's pending events; held only for a push or a swap.
// The recording thread takes only its own buffer.mu, so recording never waits
// on the file. The writer touches buffers only while holding mu, which the
// fork handlers hold across fork(): no buffer lock is ever held across it.
#include "saturate/trace/trace.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/rank_env.h"
#include "base/thread_name.h"

#if defined(SATURATE_WITH_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define SATURATE_TRACE_NVTX 1
#endif

namespace saturate::trace {
namespace {

constexpr auto kWriteInterval = std::chrono::milliseconds(100);
// Events one thread may buffer between two writes; more are dropped (and
// counted) rather than growing without bound when the disk stalls.
constexpr size_t kMaxBufferedEvents = size_t{1} << 18;
// The writer hands the file at most this much at once.
constexpr size_t kWriteChunkBytes = size_t{1} << 20;

struct Arg {
  const char* key;
  int64_t value;
};

enum class Kind : uint8_t { kSpan, kStep, kCounters };

struct Event {
  Kind kind = Kind::kSpan;
  Category category = Category::kUser;
  uint8_t nargs = 0;
  int tid = 0;
  int64_t ts_ns = 0;
  int64_t dur_ns = 0;  // kSpan
  uint64_t step = 0;   // kStep
  std::string name;    // kSpan, kCounters
  std::array<Arg, kMaxSpanArgs> args;
  std::unique_ptr<std::array<Arg, kMaxCounterValues>> values;  // kCounters
};

struct ThreadBuffer {
  std::mutex mu;
  std::vector<Event> events;   // guarded by mu
  uint64_t dropped = 0;        // guarded by mu
  int tid = 0;                 // owner thread (and the fork child) only
  std::vector<Event> drained;  // the writer's side; guarded by Recorder::mu
};

enum State : int { kUnknown, kOff, kOn, kForked };

int CurrentTid() { return static_cast<int>(syscall(SYS_gettid)); }

// ---- JSON ----------------------------------------------------------------

void AppendInt(int64_t v, std::string* out) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

// Length of the valid UTF-8 sequence at s[0], or 0 if it is not one.
size_t Utf8SequenceLength(std::string_view s) {
  const auto c = static_cast<unsigned char>(s[0]);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return 0;
  }
  return n;
}

// `s` as a JSON string. Bytes that are not UTF-8 become U+FFFD, so a user's
// name can never make the file unreadable.
void AppendJsonString(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(s.substr(i));
      if (n == 0) {
        out->append("\\ufffd");
        ++i;
      } else {
        out->append(s.substr(i, n));
        i += n;
      }
      continue;
    } else {
      out->push_back(static_cast<char>(c));
    }
    ++i;
  }
  out->push_back('"');
}

std::string_view CategoryName(Category c) {
  switch (c) {
    case Category::kUser:
      return "user";
    case Category::kLoader:
      return "loader";
    case Category::kCheckpoint:
      return "checkpoint";
  }
  return "user";
}

void AppendArgs(const Arg* args, int n, std::string* out) {
  out->append(",\"args\":{");
  for (int i = 0; i < n; ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonString(args[i].key, out);
    out->push_back(':');
    AppendInt(args[i].value, out);
  }
  out->push_back('}');
}

void AppendCommon(const Event& e, int pid, std::string* out) {
  out->append(",\"ts_ns\":");
  AppendInt(e.ts_ns, out);
  if (e.kind == Kind::kSpan) {
    out->append(",\"dur_ns\":");
    AppendInt(e.dur_ns, out);
  }
  out->append(",\"pid\":");
  AppendInt(pid, out);
  out->append(",\"tid\":");
  AppendInt(e.tid, out);
}

// One line of the spans file.
void AppendEventJson(const Event& e, int pid, std::string* out) {
  switch (e.kind) {
    case Kind::kSpan:
      out->append("{\"ph\":\"X\",\"name\":");
      AppendJsonString(e.name, out);
      out->append(",\"cat\":\"");
      out->append(CategoryName(e.category));
      out->push_back('"');
      AppendCommon(e, pid, out);
      if (e.nargs > 0) AppendArgs(e.args.data(), e.nargs, out);
      break;
    case Kind::kStep:
      out->append("{\"ph\":\"step\",\"step\":");
      AppendInt(static_cast<int64_t>(e.step), out);
      AppendCommon(e, pid, out);
      break;
    case Kind::kCounters:
      out->append("{\"ph\":\"C\",\"name\":");
      AppendJsonString(e.name, out);
      AppendCommon(e, pid, out);
      AppendArgs(e.values ? e.values->data() : nullptr, e.values ? e.nargs : 0, out);
      break;
  }
  out->append("}\n");
}

// ,"rank":{"rank":R,"local_rank":L,"world_size":W,"host":H,"launcher":N} (docs/ranks.md).
void AppendRank(const base::RankEnv& r, std::string* out) {
  out->append(",\"rank\":{\"rank\":");
  AppendInt(r.rank, out);
  out->append(",\"local_rank\":");
  AppendInt(r.local_rank, out);
  out->append(",\"world_size\":");
  AppendInt(r.world_size, out);
  out->append(",\"host\":");
  AppendJsonString(r.host, out);
  out->append(",\"launcher\":");
  AppendJsonString(r.launcher, out);
  out->append("}");
}

std::string ProcessComm() {
  char buf[64] = {};
  const int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  std::string comm(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

int64_t UnixNowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("trace: write " + path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

// ---- the recorder ----------------------------------------------------------

class Recorder {
 public:
  // Never destroyed: threads may record, and exit, while the process exits.
  static Recorder& Get() {
    static Recorder* recorder = new Recorder;
    return *recorder;
  }

  std::atomic<int> state{kUnknown};
  std::atomic<uint64_t> steps{0};

  bool SlowEnabled();
  Status Start(const std::string& run_dir);
  Status Stop();
  Status Flush();
  std::string RunDir();

  void Register(ThreadBuffer* buffer);
  void Unregister(ThreadBuffer* buffer);

  // pthread_atfork handlers.
  void BeforeFork();
  void AfterForkParent();
  void AfterForkChild(ThreadBuffer* forking_thread_buffer);

 private:
  Status StartLocked(const std::string& run_dir);
  Status OpenLocked();
  void CloseLocked();
  Status DrainLocked();
  void StartWriterLocked();
  void WriterLoop();

  std::mutex control_mu_;
  std::mutex mu_;
  std::condition_variable wake_;  // the writer: stop
  // Guarded by mu_.
  std::vector<ThreadBuffer*> buffers_;
  std::vector<Event> orphans_;  // events of threads that exited
  std::string run_dir_, path_;
  std::optional<base::RankEnv> rank_;  // when this process is one rank of several
  int fd_ = -1;
  int file_pid_ = 0;
  std::unique_ptr<std::thread> writer_;
  bool stop_writer_ = false;
  bool writer_running_ = false;      // the writer reached its loop
  std::condition_variable started_;  // the writer: running
  Status write_error_;               // the writer's first failure since the last Flush()
  std::string out_;                  // formatting scratch
  bool hooks_installed_ = false;
};

// A thread's buffer, created on its first event, handed to the orphans when
// the thread exits.
struct BufferHolder {
  ThreadBuffer* buffer = nullptr;
  bool dead = false;
  ~BufferHolder() {
    dead = true;
    if (buffer != nullptr) Recorder::Get().Unregister(buffer);
    buffer = nullptr;
  }
};
thread_local BufferHolder tls_holder;

ThreadBuffer* LocalBuffer() {
  BufferHolder& h = tls_holder;
  if (h.buffer != nullptr || h.dead) return h.buffer;
  auto* buffer = new ThreadBuffer;
  buffer->tid = CurrentTid();
  Recorder::Get().Register(buffer);
  h.buffer = buffer;
  return buffer;
}

// Appends an event to this thread's buffer; `fill` sets its fields.
template <typename Fill>
void Push(int64_t ts_ns, Fill&& fill) {
  ThreadBuffer* b = LocalBuffer();
  if (b == nullptr) return;  // the thread is exiting
  std::lock_guard<std::mutex> lock(b->mu);
  if (b->events.size() >= kMaxBufferedEvents) {
    ++b->dropped;
    return;
  }
  Event& e = b->events.emplace_back();
  e.tid = b->tid;
  e.ts_ns = ts_ns;
  fill(e);
}

void StopAtExit() { (void)Recorder::Get().Stop(); }

void PrepareFork() { Recorder::Get().BeforeFork(); }
void ParentAfterFork() { Recorder::Get().AfterForkParent(); }
void ChildAfterFork() { Recorder::Get().AfterForkChild(tls_holder.buffer); }

void Recorder::Register(ThreadBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.push_back(buffer);
}

void Recorder::Unregister(ThreadBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  // Kept while there is a file to write them to: recording, or a Stop() that
  // has not yet written everything out (a thread exiting during Stop(); in
  // Python, Thread.join() returns before the thread's buffer is handed over).
  const bool keep = state.load() == kOn || fd_ >= 0;
  {
    std::lock_guard<std::mutex> b(buffer->mu);
    if (keep) {
      for (Event& e : buffer->events) orphans_.push_back(std::move(e));
    }
  }
  buffers_.erase(std::remove(buffers_.begin(), buffers_.end(), buffer), buffers_.end());
  delete buffer;
}

bool Recorder::SlowEnabled() {
  std::lock_guard<std::mutex> control(control_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  const int s = state.load();
  if (s == kUnknown) {
    const char* dir = std::getenv("SATURATE_RUN_DIR");
    if (dir == nullptr || *dir == '\0') {
      state.store(kOff);
    } else {
      Status st = StartLocked(dir);
      if (!st.ok()) {
        write_error_ = st;
        state.store(kOff);
      }
    }
  } else if (s == kForked) {
    // The first event in a forked child: its own file, its own writer.
    Status st = OpenLocked();
    if (st.ok()) {
      StartWriterLocked();
      state.store(kOn);
    } else {
      write_error_ = st;
      run_dir_.clear();
      state.store(kOff);
    }
  }
  return state.load() == kOn;
}

Status Recorder::Start(const std::string& run_dir) {
  if (run_dir.empty()) return Status::InvalidArgument("trace: empty run directory");
  std::lock_guard<std::mutex> control(control_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  return StartLocked(run_dir);
}

Status Recorder::StartLocked(const std::string& run_dir) {
  // One rank of a torchrun/Slurm/MPI job records into its own rank-<r>/.
  const std::optional<base::RankEnv> rank = base::RankFromEnv();
  const std::string dir = base::RankRunDir(run_dir, rank);
  if (state.load() == kOn && dir == run_dir_ && fd_ >= 0) return Status::OK();
  Status previous;
  if (fd_ >= 0) {
    previous = DrainLocked();
    CloseLocked();
  }
  // Events left in buffers from before the last Stop() are not this run's.
  for (ThreadBuffer* b : buffers_) {
    std::lock_guard<std::mutex> bl(b->mu);
    b->events.clear();
    b->dropped = 0;
  }
  orphans_.clear();
  rank_ = rank;
  run_dir_ = dir;
  Status st = OpenLocked();
  if (!st.ok()) {
    run_dir_.clear();
    state.store(kOff);
    return st;
  }
  if (!hooks_installed_) {
    hooks_installed_ = true;
    std::atexit(&StopAtExit);
    pthread_atfork(&PrepareFork, &ParentAfterFork, &ChildAfterFork);
  }
  StartWriterLocked();
  state.store(kOn);
  return previous;
}

Status Recorder::OpenLocked() {
  std::error_code ec;
  std::filesystem::create_directories(run_dir_, ec);
  if (ec)
    return Status::IOError("trace: cannot create run directory " + run_dir_ + ": " + ec.message());
  file_pid_ = static_cast<int>(getpid());
  path_ = run_dir_ + "/spans-" + std::to_string(file_pid_) + ".jsonl";
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::FromErrno("trace: open " + path_, errno);
  std::string meta = "{\"ph\":\"M\",\"pid\":";
  AppendInt(file_pid_, &meta);
  meta += ",\"comm\":";
  AppendJsonString(ProcessComm(), &meta);
  meta += ",\"clock\":\"CLOCK_MONOTONIC\",\"ts_ns\":";
  AppendInt(NowNs(), &meta);
  meta += ",\"unix_ns\":";
  AppendInt(UnixNowNs(), &meta);
  if (rank_) AppendRank(*rank_, &meta);
  meta += "}\n";
  Status st = WriteAll(fd_, meta, path_);
  if (!st.ok()) CloseLocked();
  return st;
}

void Recorder::CloseLocked() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void Recorder::StartWriterLocked() {
  if (writer_) return;
  stop_writer_ = false;
  writer_running_ = false;
  writer_ = std::make_unique<std::thread>([this] { WriterLoop(); });
}

void Recorder::WriterLoop() {
  base::NameThisThread("trace");
  std::unique_lock<std::mutex> lock(mu_);
  writer_running_ = true;
  started_.notify_all();
  while (true) {
    wake_.wait_for(lock, kWriteInterval, [&] { return stop_writer_; });
    if (stop_writer_) return;
    Status st = DrainLocked();
    if (!st.ok() && write_error_.ok()) write_error_ = st;
  }
}

Status Recorder::DrainLocked() {
  if (fd_ < 0) return Status::OK();
  Status result;
  uint64_t dropped = 0;
  auto write_out = [&](bool force) {
    if (out_.empty() || (!force && out_.size() < kWriteChunkBytes)) return;
    Status st = WriteAll(fd_, out_, path_);
    if (!st.ok() && result.ok()) result = st;
    out_.clear();
  };
  out_.clear();
  for (ThreadBuffer* b : buffers_) {
    b->drained.clear();
    {
      std::lock_guard<std::mutex> bl(b->mu);
      b->events.swap(b->drained);
      dropped += b->dropped;
      b->dropped = 0;
    }
    for (const Event& e : b->drained) {
      AppendEventJson(e, file_pid_, &out_);
      write_out(false);
    }
    b->drained.clear();  // keeps its capacity for the next swap
  }
  for (const Event& e : orphans_) {
    AppendEventJson(e, file_pid_, &out_);
    write_out(false);
  }
  orphans_.clear();
  if (dropped > 0) {
    Event e;
    e.kind = Kind::kCounters;
    e.name = "trace";
    e.ts_ns = NowNs();
    e.tid = CurrentTid();
    e.values = std::make_unique<std::array<Arg, kMaxCounterValues>>();
    (*e.values)[0] = Arg{"dropped_events", static_cast<int64_t>(dropped)};
    e.nargs = 1;
    AppendEventJson(e, file_pid_, &out_);
  }
  write_out(true);
  if (out_.capacity() > 4 * kWriteChunkBytes) std::string().swap(out_);
  return result;
}

Status Recorder::Stop() {
  std::lock_guard<std::mutex> control(control_mu_);
  std::unique_ptr<std::thread> writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state.load() != kOn) {
      if (state.load() == kForked) run_dir_.clear();
      state.store(kOff);
      return Status::OK();
    }
    state.store(kOff);
    stop_writer_ = true;
    writer = std::move(writer_);
  }
  wake_.notify_all();
  if (writer) writer->join();
  std::lock_guard<std::mutex> lock(mu_);
  stop_writer_ = false;
  Status st = DrainLocked();
  if (st.ok()) st = write_error_;
  write_error_ = Status::OK();
  CloseLocked();
  run_dir_.clear();
  return st;
}

Status Recorder::Flush() {
  std::lock_guard<std::mutex> control(control_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  Status st = DrainLocked();
  if (st.ok()) st = write_error_;
  write_error_ = Status::OK();
  return st;
}

std::string Recorder::RunDir() {
  std::lock_guard<std::mutex> lock(mu_);
  return state.load() == kOn ? run_dir_ : std::string();
}

void Recorder::BeforeFork() {
  control_mu_.lock();
  std::unique_lock<std::mutex> lock(mu_);
  // A writer still starting may be inside the thread start-up of the C
  // library or of a sanitizer runtime, holding an allocator lock that the
  // child would inherit locked: its own writer then never starts (seen with
  // ASan when fork() came right after Start()).
  started_.wait(lock, [&] { return !writer_ || writer_running_; });
  (void)lock.release();  // held across fork(); the after-fork handlers unlock it
}

void Recorder::AfterForkParent() {
  mu_.unlock();
  control_mu_.unlock();
}

void Recorder::AfterForkChild(ThreadBuffer* forking_thread_buffer) {
  // Only this thread exists now. Other threads' buffers are left as they
  // are (their locks may be held); the parent writes their events.
  buffers_.clear();
  if (forking_thread_buffer != nullptr) {
    forking_thread_buffer->events.clear();
    forking_thread_buffer->dropped = 0;
    forking_thread_buffer->tid = CurrentTid();
    buffers_.push_back(forking_thread_buffer);
  }
  orphans_.clear();
  CloseLocked();
  (void)writer_.release();  // the thread did not survive fork(); its handle is void
  stop_writer_ = false;
  writer_running_ = false;
  write_error_ = Status::OK();
  if (state.load() == kOn) state.store(kForked);
  mu_.unlock();
  control_mu_.unlock();
}

#ifdef SATURATE_TRACE_NVTX
void NvtxPush(std::string_view name) {
  char buf[128];
  const size_t n = std::min(name.size(), sizeof(buf) - 1);
  std::memcpy(buf, name.data(), n);
  buf[n] = '\0';
  nvtxRangePushA(buf);
}
#endif

}  // namespace

Status Start(const std::string& run_dir) { return Recorder::Get().Start(run_dir); }
Status Stop() { return Recorder::Get().Stop(); }
Status Flush() { return Recorder::Get().Flush(); }
std::string RunDir() {
  Enabled();  // the lazy start from SATURATE_RUN_DIR
  return Recorder::Get().RunDir();
}

bool Enabled() {
  Recorder& r = Recorder::Get();
  const int s = r.state.load(std::memory_order_acquire);
  if (s == kOn) return true;
  if (s == kOff) return false;
  return r.SlowEnabled();
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void RecordSpan(std::string_view name, int64_t start_ns, int64_t end_ns, Category category,
                std::initializer_list<std::pair<const char*, int64_t>> args) {
  if (!Enabled()) return;
  Push(start_ns, [&](Event& e) {
    e.kind = Kind::kSpan;
    e.category = category;
    e.dur_ns = end_ns - start_ns;
    e.name.assign(name);
    for (const auto& [key, value] : args) {
      if (e.nargs == kMaxSpanArgs) break;
      e.args[e.nargs++] = Arg{key, value};
    }
  });
}

uint64_t Step() {
  const uint64_t step = Recorder::Get().steps.fetch_add(1) + 1;
  if (Enabled()) {
    Push(NowNs(), [&](Event& e) {
      e.kind = Kind::kStep;
      e.step = step;
    });
  }
  return step;
}

void RecordCounters(std::string_view name,
                    std::initializer_list<std::pair<const char*, int64_t>> values) {
  if (!Enabled()) return;
  auto array = std::make_unique<std::array<Arg, kMaxCounterValues>>();
  uint8_t n = 0;
  for (const auto& [key, value] : values) {
    if (n == kMaxCounterValues) break;
    (*array)[n++] = Arg{key, value};
  }
  Push(NowNs(), [&](Event& e) {
    e.kind = Kind::kCounters;
    e.name.assign(name);
    e.nargs = n;
    e.values = std::move(array);
  });
}

Phase::Phase(std::string_view name, Category category)
    : name_(name), category_(category), start_ns_(0), enabled_(Enabled()) {
#ifdef SATURATE_TRACE_NVTX
  NvtxPush(name);
#endif
  if (enabled_) start_ns_ = NowNs();
}

Phase::~Phase() {
  if (enabled_) RecordSpan(name_, start_ns_, NowNs(), category_);
#ifdef SATURATE_TRACE_NVTX
  nvtxRangePop();
#endif
}

}  // namespace saturate::trace
