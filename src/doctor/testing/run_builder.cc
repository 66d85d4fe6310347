#include "doctor/testing/run_builder.h"

#include <algorithm>
#include <cmath>

namespace saturate::doctor::testing {
namespace {

int64_t Ns(double seconds) { return std::llround(seconds * 1e9); }

}  // namespace

RunBuilder::RunBuilder() {
  run_.meta.dir = "runs/synthetic";
  run_.meta.cpus = 16;
  run_.meta.mem_total_bytes = 64 * kGiB;
  run_.meta.interval_ns = 100'000'000;
  run_.meta.start_monotonic_ns = 0;
}

RunBuilder& RunBuilder::Cpus(int cpus) {
  run_.meta.cpus = cpus;
  return *this;
}

RunBuilder& RunBuilder::Gpus(int count, uint64_t memory_total_bytes) {
  run_.meta.gpu_count = count;
  run_.meta.gpu_memory_total_bytes.assign(count, memory_total_bytes);
  return *this;
}

RunBuilder& RunBuilder::ExitCode(int code) {
  run_.meta.exit_code = code;
  return *this;
}

RunBuilder& RunBuilder::Steps(int count, const std::vector<Phase>& phases, double gap_seconds) {
  for (int i = 0; i < count; ++i) {
    for (const Phase& p : phases) {
      AddSpan(p.name, p.kind, kPid, kTid, now_s_, p.seconds);
      if (!p.inner_name.empty()) {
        AddSpan(p.inner_name, p.inner_kind, kPid, kTid, now_s_, p.inner_seconds);
      }
      now_s_ += p.seconds;
    }
    now_s_ += gap_seconds;
    run_.step_marks_ns[kPid].push_back(Ns(now_s_));
  }
  return *this;
}

RunBuilder& RunBuilder::Pause(double seconds) {
  now_s_ += seconds;
  return *this;
}

RunBuilder& RunBuilder::AddSpan(std::string name, SpanKind kind, int pid, int64_t tid,
                                double start_s, double seconds) {
  Span s;
  s.name = std::move(name);
  s.kind = kind;
  s.pid = pid;
  s.tid = tid;
  s.start_ns = Ns(start_s);
  s.dur_ns = Ns(seconds);
  run_.spans.push_back(std::move(s));
  return *this;
}

RunBuilder& RunBuilder::Loader(std::map<std::string, int64_t> values) {
  loader_ = std::move(values);
  has_loader_ = true;
  return *this;
}

RunBuilder& RunBuilder::Counter(const std::string& name, std::map<std::string, int64_t> values) {
  run_.counters[name] = std::move(values);
  return *this;
}

RunBuilder& RunBuilder::Samples(std::function<void(double, SamplePoint&)> fill) {
  fill_ = std::move(fill);
  return *this;
}

bool RunBuilder::InPhase(double t_s, std::string_view name) const {
  const int64_t t = Ns(t_s);
  for (const Span& s : run_.spans) {
    if (s.pid == kPid && s.tid == kTid && s.name == name && t >= s.start_ns &&
        t < s.start_ns + s.dur_ns) {
      return true;
    }
  }
  return false;
}

Run RunBuilder::Build() const {
  Run run = run_;
  const double end_s = now_s_ + 1.0;
  run.meta.duration_ns = Ns(end_s);
  for (int64_t t = 0; t <= run.meta.duration_ns; t += run.meta.interval_ns) {
    SamplePoint s;
    s.t_ns = t;
    s.cpu_busy_pct = 30;
    s.cpu_iowait_pct = 0.5;
    s.mem_total_bytes = run.meta.mem_total_bytes;
    s.mem_available_bytes = run.meta.mem_total_bytes / 2;
    s.tree_cpu_pct = 400;
    s.tree_rss_bytes = 4 * kGiB;
    for (int g = 0; g < run.meta.gpu_count; ++g) {
      GpuPoint p;
      p.index = g;
      p.util_pct = 95;
      p.memory_total_bytes = run.meta.gpu_memory_total_bytes[g];
      p.memory_used_bytes = run.meta.gpu_memory_total_bytes[g] / 4;
      p.sm_clock_mhz = 1980;
      s.gpus.push_back(p);
    }
    if (fill_) fill_(double(t) / 1e9, s);
    run.samples.push_back(std::move(s));
  }
  if (has_loader_) run.loaders.push_back({kPid, run.meta.duration_ns, loader_});
  std::stable_sort(run.spans.begin(), run.spans.end(),
                   [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  return run;
}

}  // namespace saturate::doctor::testing
