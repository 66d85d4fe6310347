// Source: fetches what fleet.h analyzes from a Prometheus server's HTTP API
// (GET /api/v1/query_range), with the PromQL built here: GPU utilization
// and memory in use and free (the names saturate watch and dcgm-exporter
// share) and the exporters' `up`, over [end - since, end] at `step`.
//
// Errors say what went wrong in the terms of the command's flags: a server
// that is down, slow (--timeout), not Prometheus (an HTML page), a query it
// rejects (its errorType and error), or no GPU series at all. Prometheus'
// warnings and series that are missing but optional (memory, up) become
// FleetInput::notes, so the report says what it could not see.
//
// Thread-safety: Fetch is reentrant; each call opens its own connection.
#ifndef SATURATE_FLEET_SOURCE_H_
#define SATURATE_FLEET_SOURCE_H_

#include <string>
#include <string_view>

#include "fleet/fleet.h"
#include "saturate/base/status.h"

namespace saturate::fleet {

struct SourceOptions {
  std::string url;  // http(s)://host[:port][/path prefix]
  double since_s = 24 * 3600;
  double end_s = 0;   // unix seconds; 0: now
  double step_s = 0;  // 0: since / 1440, at least 15 s
  double timeout_s = 30;
  std::string selector;  // more label matchers for every GPU query: cluster="a"
  std::string scrape_job = ".*saturate.*|.*dcgm.*";  // regex over `up`'s job label
};

Result<FleetInput> Fetch(const SourceOptions& options);

// The step Fetch uses for `since_s` when none is given.
double AutoStep(double since_s);

// A label selector for a metric: "DCGM_FI_DEV_GPU_UTIL" + `extra` matchers.
std::string Selector(std::string_view metric, std::string_view extra);

// Parses a query_range answer (the JSON body) into series; `query` names it
// in errors. Prometheus' warnings are appended to `warnings`.
Result<std::vector<Series>> ParseMatrix(std::string_view body, std::string_view query,
                                        std::vector<std::string>* warnings);

}  // namespace saturate::fleet

#endif  // SATURATE_FLEET_SOURCE_H_
