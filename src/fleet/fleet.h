// Fleet: where a cluster's GPU-hours go, from the GPU utilization and memory
// series a Prometheus server holds (saturate watch's and dcgm-exporter's
// share their names: DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED/_FREE).
//
// A series with a job label (job_id, hpc_job, pod, run_id: the first set)
// is a GPU allocated to that job for as long as it has samples; one without
// is a free GPU. From them, per job, user and node:
//   idle allocation   an allocated GPU below `idle_below_pct` for at least
//                     `idle_for_s` without a break
//   saw-tooth         utilization flipping between idle and busy from one
//                     sample to the next (at step cadence): likely input-bound
//   over-allocation   a job holding k GPUs of which fewer are ever busy
//   memory headroom   a job whose GPUs never used half their memory
// and a ranking of jobs by GPU-hours wasted, with cost at a price per
// GPU-hour. Gaps (an exporter down, a target not scraped, Prometheus'
// warnings, a GPU exported twice) are reported next to the figures they
// touch, never silently averaged over.
//
// Everything here is pure: Analyze() takes series already fetched
// (source.h fetches them), so it is tested on recorded data.
// Thread-safety: reentrant pure functions over values.
#ifndef SATURATE_FLEET_FLEET_H_
#define SATURATE_FLEET_FLEET_H_

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace saturate::fleet {

using LabelSet = std::map<std::string, std::string>;

struct Point {
  double t_s = 0;  // unix seconds
  double value = 0;
};

struct Series {
  LabelSet labels;
  std::vector<Point> points;  // ascending time
};

struct FleetInput {
  double start_s = 0, end_s = 0, step_s = 60;  // the range queried
  std::vector<Series> util;                    // percent
  std::vector<Series> mem_used;                // MiB
  std::vector<Series> mem_free;                // MiB
  std::vector<Series> up;                      // up{job=...}: 1 scraped, 0 down
  std::vector<std::string> notes;              // what the source could not get
};

struct FleetOptions {
  double idle_below_pct = 5;
  double idle_for_s = 30 * 60;
  double busy_pct = 50;             // saw-tooth: a sample at or above this is busy...
  double sawtooth_idle_pct = 20;    // ...one below this is idle
  double sawtooth_min_flips = 0.1;  // flips per sample of the busy part
  double used_pct = 10;             // over-allocation: a GPU whose mean is under this is unused
  double headroom_pct = 50;         // memory: a job whose peak is under this share
  double gpu_hour_price = 0;        // 0: no cost column
  double min_coverage = 0.9;        // a node with less of the window is flagged
};

// One GPU held by one job (or by none) over the window.
struct Holding {
  std::string host, gpu, uuid, model;
  std::string job;   // "" for a free GPU
  std::string user;  // "" when unknown
  double first_s = 0, last_s = 0;
  double hours = 0;       // samples x step
  double busy_hours = 0;  // sum of util/100 x step
  double idle_hours = 0;  // in idle runs of at least idle_for
  double wait_hours = 0;  // saw-tooth: the idle share of the busy part
  double mean_util_pct = 0;
  double flips_per_sample = 0;
  bool sawtooth = false;
  double peak_mem_mib = -1, total_mem_mib = -1;  // -1: no memory series
};

struct Finding {
  std::string kind;  // idle_allocation, sawtooth, over_allocation, memory_headroom
  std::string job, user;
  double wasted_gpu_hours = 0;  // memory_headroom: 0 (room, not waste)
  std::string message;          // what was seen, with numbers
  std::string fix;              // what to do
};

struct Group {  // one job, user or node
  std::string name;
  std::string user;  // jobs only
  std::vector<std::string> hosts;
  int gpus = 0;
  int used_gpus = 0;
  double hours = 0, busy_hours = 0, idle_hours = 0, wait_hours = 0, unused_hours = 0;
  double free_hours = 0;  // nodes only: GPU-hours of GPUs no job held
  double wasted_hours() const { return idle_hours + wait_hours + unused_hours; }
  double peak_mem_pct = -1;  // jobs only
};

struct FleetReport {
  double start_s = 0, end_s = 0, step_s = 0;
  std::vector<Holding> holdings;  // by host, gpu, first seen
  std::vector<Group> jobs;        // most wasted first
  std::vector<Group> users;       // most wasted first
  std::vector<Group> nodes;       // by name
  std::vector<Finding> findings;  // most wasted first
  std::vector<std::string> gaps;  // missing or partial data, each a sentence
  double gpu_hour_price = 0;
};

FleetReport Analyze(const FleetInput& input, const FleetOptions& options);

// The job a series belongs to ("" for none) and its user ("" unknown).
std::string JobOf(const LabelSet& labels);
std::string UserOf(const LabelSet& labels);
// The node (Hostname, else the scrape target) and the GPU (index, else UUID).
std::string HostOf(const LabelSet& labels);
std::string GpuOf(const LabelSet& labels);

// Presentations: a terminal summary (80 columns where words allow), the
// JSON document `--json` prints, and a self-contained HTML page (a heat map
// of utilization per node and GPU over time, the tables; every label value
// HTML-escaped). `input` gives the heat map its samples.
std::string RenderText(const FleetReport& report, const std::string& source, int max_rows = 10);
nlohmann::json ReportJson(const FleetReport& report);
std::string RenderHtml(const FleetReport& report, const FleetInput& input,
                       const std::string& source);

}  // namespace saturate::fleet

#endif  // SATURATE_FLEET_FLEET_H_
