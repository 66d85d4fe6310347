#include "doctor/testing/report_fixture.h"

#include <cmath>
#include <cstdint>

namespace saturate::doctor::testing {
namespace {

constexpr int64_t kIntervalNs = 100'000'000;
constexpr int kSamples = 623;  // 62.3 s

// The GPU's utilization at sample i: busy ~0.5 s, then idle ~0.6 s waiting for data.
double SawTooth(int i) { return i % 11 < 5 ? 92.0 + (i % 3) : 3.0 * (i % 2); }

}  // namespace

Run SyntheticRun() {
  Run run;
  run.meta.dir = "runs/doctor-20261123-101500";
  run.meta.command = {"python", "train.py", "--epochs", "3", "--data", "/data/imagenet train"};
  run.meta.host = "gpu-box-7";
  run.meta.cpus = 8;
  run.meta.mem_total_bytes = uint64_t(64) << 30;
  run.meta.gpu_status = "NVML 12.550";
  run.meta.gpu_count = 1;
  run.meta.gpu_memory_total_bytes = {uint64_t(80) << 30};
  run.meta.start_unix_ns = int64_t(1'795'428'900) * 1'000'000'000;
  run.meta.interval_ns = kIntervalNs;
  run.meta.duration_ns = int64_t(kSamples) * kIntervalNs;
  run.meta.exit_code = 0;
  for (int i = 0; i < kSamples; ++i) {
    SamplePoint s;
    s.t_ns = int64_t(i + 1) * kIntervalNs;
    s.cpu_busy_pct = 30 + 8 * std::sin(i * 0.3);
    s.cpu_iowait_pct = 1.5;
    s.mem_total_bytes = run.meta.mem_total_bytes;
    s.mem_available_bytes = uint64_t(40) << 30;
    s.tree_cpu_pct = 210;
    GpuPoint g;
    g.util_pct = SawTooth(i);
    g.memory_used_bytes = uint64_t(21) << 30;
    g.memory_total_bytes = uint64_t(80) << 30;
    s.gpus.push_back(g);
    run.samples.push_back(s);
  }
  run.loaders.push_back(
      {4242, run.meta.duration_ns, {{"batch_size", 256}, {"threads", 2}, {"samples", 122880}}});
  return run;
}

Analysis SyntheticAnalysis() {
  Analysis a;
  Features& f = a.features;
  f.duration_s = 62.3;
  f.cpus = 8;
  f.gpu_count = 1;
  f.device_busy_pct = 41.2;
  for (int i = 0; i < kSamples; ++i) {
    f.device_busy_timeline.push_back({double(i + 1) * 0.1, SawTooth(i)});
  }
  f.idle_gaps_s = {{0.05, 0.1, 0.25, 0.5, 1, 2}, {3, 1, 4, 41, 9, 2, 0}};
  f.idle_period_s = 1.1;
  f.steps = 480;
  f.step_time_median_s = 0.13;
  f.phases = {{"data_wait", 32.4, 52.0}, {"forward", 12.5, 20.1}, {"backward", 11.2, 18.0},
              {"optimizer", 3.7, 5.9},   {"copy", 1.5, 2.4},      {"other", 1.0, 1.6}};
  f.waterfall = {{240,
                  31.0,
                  0.13,
                  {{"data_wait", 0, 0.07},
                   {"forward", 0.07, 0.025},
                   {"backward", 0.095, 0.025},
                   {"optimizer", 0.12, 0.008}}},
                 {241,
                  31.13,
                  0.12,
                  {{"data_wait", 0, 0.06},
                   {"forward", 0.06, 0.026},
                   {"backward", 0.086, 0.024},
                   {"optimizer", 0.11, 0.008}}}};
  f.data_wait_pct = 52.0;
  f.copy_pct = 2.4;
  f.host_cpu_busy_pct = 30.2;
  f.host_iowait_pct = 1.5;
  f.tree_cpu_cores = 2.1;
  f.other_cpu_cores = 0.3;
  f.mem_headroom_pct = 62.5;
  f.disk_read_mb_per_s = 41.0;
  f.gpu_busy_pct = {41.2};
  f.loader_threads = 2;
  f.loader_batch_size = 256;
  f.loader_cpu_ns_per_sample = 2.1e6;
  f.samples_per_s = 1970;

  Finding input;
  input.cause = "input_pipeline";
  input.title = "the GPU waits for the next batch: data wait is 52% of step time";
  input.time_lost_s = 31.2;
  input.time_lost_pct = 50.1;
  input.evidence = {{"data_wait_pct", 52.0, "%", "of step time spent waiting for the next batch"},
                    {"decode_ms", 2.1, "ms", "per-sample decode on one loader thread"},
                    {"target_samples_per_s", 2800, "samples/s", "needed to keep the GPU busy"},
                    {"idle_period_s", 1.1, "s", "period of the utilization saw-tooth"}};
  input.fix = "threads 2 → 6 (per-sample decode 2.1 ms × 2800 samples/s target)";
  input.fix_value = std::pair<std::string, double>{"threads", 6};
  input.confidence = 0.9;

  Finding cpu;
  cpu.cause = "cpu_contention";
  cpu.title = "other processes use 2.5 cores the loader threads could use";
  cpu.time_lost_s = 4.0;
  cpu.time_lost_pct = 6.4;
  cpu.evidence = {{"other_cpu_cores", 2.5, "cores", "used by processes outside the run"}};
  cpu.fix = "stop or renice the other work on this host while training";
  cpu.confidence = 0.55;
  a.findings = {input, cpu};
  return a;
}

RanksView SyntheticRanks(int steps) {
  RanksView v;
  v.world_size = 4;
  v.hosts = {"gpu-box-7", "gpu-box-8"};
  v.clock_method = "collectives";
  v.residual_skew_ms = 0.4;
  v.straggler = 2;
  v.others_wait_per_step_s = 0.041;
  v.straggler_reason = "data_wait";
  for (int r = 0; r < 3; ++r) {
    RankRow row;
    row.rank = r;
    row.local_rank = r % 2;
    row.host = v.hosts[size_t(r / 2)];
    row.gpu = "cuda:" + std::to_string(r % 2);
    row.clock_offset_ms = r < 2 ? 0 : -12.5;
    row.exit_code = 0;
    row.exited = true;
    const int n = r == 2 ? steps - 3 : steps;
    for (int i = 0; i < n; ++i) {
      const double data_wait = r == 2 ? 0.045 + 0.002 * (i % 3) : 0.001;
      const double wait = r == 2 ? 0.0 : 0.041 + 0.001 * (i % 2);
      row.data_wait_s.push_back(data_wait);
      row.wait_s.push_back(wait);
      row.step_s.push_back(0.12 + (r == 2 ? data_wait - 0.001 : wait) + 0.0005 * (i % 5));
    }
    v.rows.push_back(std::move(row));
  }
  RankRow missing;
  missing.rank = 3;
  missing.local_rank = 1;
  missing.host = "gpu-box-8";
  missing.note = "rank directory missing";
  v.rows.push_back(std::move(missing));
  return v;
}

}  // namespace saturate::doctor::testing
