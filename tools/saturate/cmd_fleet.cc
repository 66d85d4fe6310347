// saturate fleet --prometheus URL [--since 24h]: where a cluster's GPU-hours
// go (idle allocations, saw-tooth jobs, over-allocation, unused memory) from
// the series a Prometheus server already holds; and `saturate fleet rules`,
// the alerting rules for the same patterns. The analysis lives in src/fleet.
#include <iostream>
#include <memory>
#include <string>

#include "base/file.h"
#include "cli.h"
#include "fleet/fleet.h"
#include "fleet/rules.h"
#include "fleet/source.h"

namespace saturate::cli {
namespace {

struct FleetFlags {
  std::string prometheus;
  std::string since = "24h";
  double end_unix_s = 0;
  std::string step;
  std::string timeout = "30s";
  std::string selector;
  std::string scrape_job = fleet::SourceOptions().scrape_job;
  double idle_below_pct = fleet::FleetOptions().idle_below_pct;
  std::string idle_for = "30min";
  double gpu_hour_price = 0;
  bool json = false;
  std::string html;
  int max_rows = 10;
};

Result<double> Seconds(const std::string& text, const char* flag) {
  Result<int64_t> ns = ParseDurationNs(text);
  if (!ns.ok()) return ns.status().WithContext(flag);
  return double(*ns) / 1e9;
}

Status RunFleet(const FleetFlags& f) {
  fleet::SourceOptions source;
  source.url = f.prometheus;
  SATURATE_ASSIGN_OR_RETURN(source.since_s, Seconds(f.since, "--since"));
  if (!f.step.empty()) {
    SATURATE_ASSIGN_OR_RETURN(source.step_s, Seconds(f.step, "--step"));
  }
  SATURATE_ASSIGN_OR_RETURN(source.timeout_s, Seconds(f.timeout, "--timeout"));
  source.end_s = f.end_unix_s;
  source.selector = f.selector;
  source.scrape_job = f.scrape_job;
  fleet::FleetOptions options;
  options.idle_below_pct = f.idle_below_pct;
  SATURATE_ASSIGN_OR_RETURN(options.idle_for_s, Seconds(f.idle_for, "--idle-for"));
  options.gpu_hour_price = f.gpu_hour_price;
  if (f.gpu_hour_price < 0) return Status::InvalidArgument("--gpu-hour-price must be >= 0");

  SATURATE_ASSIGN_OR_RETURN(fleet::FleetInput input, fleet::Fetch(source));
  const fleet::FleetReport report = fleet::Analyze(input, options);
  if (!f.html.empty()) {
    SATURATE_RETURN_IF_ERROR(
        WriteFileAtomic(f.html, fleet::RenderHtml(report, input, f.prometheus)));
  }
  if (f.json) {
    std::cout << fleet::ReportJson(report).dump(2) << "\n";
  } else {
    std::cout << fleet::RenderText(report, f.prometheus, f.max_rows);
    if (!f.html.empty()) std::cout << "\nreport: " << f.html << "\n";
  }
  return Status::OK();
}

}  // namespace

void RegisterFleetRules(CLI::App& fleet, int* exit_code) {
  auto o = std::make_shared<fleet::RuleOptions>();
  CLI::App* cmd = fleet.add_subcommand(
      "rules",
      "Print Prometheus alerting rules for idle allocated GPUs, saw-tooth GPUs, stalled jobs "
      "and exporters down (docs/alerts.md); with no flags, deploy/prometheus/"
      "saturate-rules.yml.\n"
      "  saturate fleet rules --idle-for 1h > /etc/prometheus/rules/saturate.yml");
  cmd->add_option("--scrape-job", o->scrape_job, "The scrape job of saturate's exporters")
      ->capture_default_str();
  cmd->add_option("--idle-below", o->idle_below_pct,
                  "Utilization (percent) under which a GPU "
                  "is idle")
      ->capture_default_str();
  cmd->add_option("--idle-for", o->idle_for,
                  "How long an allocated GPU idles before the alert "
                  "(PromQL duration: 30m, 1h)")
      ->capture_default_str();
  cmd->add_option("--sawtooth-window", o->sawtooth_window, "Window of the saw-tooth statistics")
      ->capture_default_str();
  cmd->add_option("--sawtooth-stddev", o->sawtooth_stddev_pct,
                  "Standard deviation of utilization (points) above which a GPU saw-tooths")
      ->capture_default_str();
  cmd->add_option("--sawtooth-min-mean", o->sawtooth_min_mean_pct,
                  "Mean utilization (percent) a saw-tooth GPU has at least")
      ->capture_default_str();
  cmd->add_option("--stall-for", o->stall_for, "How long a job marks no step before the alert")
      ->capture_default_str();
  cmd->add_option("--down-for", o->down_for, "How long an exporter is down before the alert")
      ->capture_default_str();
  cmd->callback([exit_code, o] {
    if (Status s = fleet::Validate(*o); !s.ok()) {
      *exit_code = ReportError("fleet rules", s);
      return;
    }
    std::cout << fleet::AlertRulesYaml(*o);
    *exit_code = kExitOk;
  });
}

void RegisterFleet(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<FleetFlags>();
  CLI::App* cmd = app.add_subcommand(
      "fleet",
      "Where a cluster's GPU-hours go, from Prometheus: idle allocated GPUs, saw-tooth jobs, "
      "over-allocation and unused memory, by job, user and node (docs/fleet.md).\n"
      "  saturate fleet --prometheus http://prometheus:9090 --since 24h --gpu-hour-price 2.5\n"
      "  saturate fleet rules > saturate-rules.yml    # the alerting rules");
  cmd->add_option("--prometheus", f->prometheus,
                  "The Prometheus server's URL, e.g. http://127.0.0.1:9090");
  cmd->add_option("--since", f->since, "How far back to look, e.g. 6h, 24h, 7d")
      ->capture_default_str();
  cmd->add_option("--end", f->end_unix_s, "End of the window, unix seconds (default: now)");
  cmd->add_option("--step", f->step,
                  "Query resolution, e.g. 15s, 1min (default: the window / 1440, at least 15s)");
  cmd->add_option("--timeout", f->timeout, "How long to wait for each answer")
      ->capture_default_str();
  cmd->add_option("--selector", f->selector,
                  "More PromQL label matchers for the GPU series, e.g. 'cluster=\"a\"'");
  cmd->add_option("--scrape-job", f->scrape_job,
                  "Regex over the scrape jobs of the exporters, for their `up` series")
      ->capture_default_str();
  cmd->add_option("--idle-below", f->idle_below_pct,
                  "A GPU under this utilization (percent) is idle")
      ->capture_default_str();
  cmd->add_option("--idle-for", f->idle_for,
                  "An allocated GPU idle this long without a break is an idle allocation")
      ->capture_default_str();
  cmd->add_option("--gpu-hour-price", f->gpu_hour_price,
                  "Price of one GPU-hour: adds cost columns");
  cmd->add_flag("--json", f->json, "Print the report as JSON");
  cmd->add_option("--html", f->html, "Also write an HTML page (heat map per node and GPU)");
  cmd->add_option("--max-rows", f->max_rows, "Rows per table in the terminal")
      ->capture_default_str();
  cmd->callback([cmd, exit_code, f] {
    if (!cmd->get_subcommands().empty()) return;  // `fleet rules`
    if (f->prometheus.empty()) {
      *exit_code =
          ReportError("fleet", Status::InvalidArgument("--prometheus URL is required (or: saturate "
                                                       "fleet rules)"));
      return;
    }
    Status s = RunFleet(*f);
    *exit_code = s.ok() ? kExitOk : ReportError("fleet", s);
  });
  RegisterFleetRules(*cmd, exit_code);
}

}  // namespace saturate::cli
