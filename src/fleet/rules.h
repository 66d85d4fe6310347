// Prometheus alerting rules for a GPU fleet watched by saturate (and/or
// dcgm-exporter): RuleOptions -> one rules file, group `saturate`, four alerts.
//   SaturateIdleAllocatedGPU  an allocated GPU stayed under a utilization threshold
//   SaturateSawtoothGPU       an allocated GPU alternates idle/busy (likely input-bound)
//   SaturateStalledJob        a job stopped marking training steps, its processes alive
//   SaturateExporterDown      Prometheus cannot scrape a saturate exporter
// A GPU is allocated when its series carries a job label: saturate's `job_id`,
// dcgm-exporter's `hpc_job` (Slurm mapping) or `pod` (Kubernetes). The shipped
// deploy/prometheus/saturate-rules.yml is AlertRulesYaml(RuleOptions{}) byte for
// byte (a test holds them together); docs/alerts.md explains each alert.
//
// Thread-safety: plain values and pure functions.
#ifndef SATURATE_FLEET_RULES_H_
#define SATURATE_FLEET_RULES_H_

#include <string>

#include "saturate/base/status.h"

namespace saturate::fleet {

// Field names map to `saturate fleet rules` flags: idle_for <-> --idle-for.
// Durations use PromQL's syntax: one or more <integer><unit>, units in the order
// y w d h m s ms, e.g. "30s", "5m", "1h30m".
struct RuleOptions {
  std::string scrape_job = "saturate";  // `up{job=...}` of the exporters
  double idle_below_pct = 5;            // GPU util under this counts as idle
  std::string idle_for = "30m";         // PromQL duration
  std::string sawtooth_window = "10m";
  double sawtooth_stddev_pct = 25;    // stddev of util over the window above this...
  double sawtooth_min_mean_pct = 10;  // ...with a mean above this (not idle)
  std::string stall_for = "15m";
  std::string down_for = "5m";
};

// OK, or InvalidArgument naming the flag of the first bad field ("--idle-for:
// \"30x\" is not a PromQL duration ..."): durations must parse and be > 0,
// percentages lie in their range, scrape_job is non-empty without control
// characters.
Status Validate(const RuleOptions& options);

// The rules file (YAML, ends with a newline). Call Validate first: for invalid
// options the text is still safely quoted YAML but Prometheus may reject it.
std::string AlertRulesYaml(const RuleOptions& options);

// Milliseconds in a PromQL duration ("1h30m" -> 5400000), or InvalidArgument
// (no flag name in the message; Validate adds it).
Result<long long> ParsePromDurationMs(const std::string& text);

}  // namespace saturate::fleet

#endif  // SATURATE_FLEET_RULES_H_
