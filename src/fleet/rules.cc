#include "fleet/rules.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

namespace saturate::fleet {
namespace {

// The label that marks a series as belonging to a job, one per exporter flavour:
// saturate's own (`job_id`, from Slurm), dcgm-exporter's Slurm mapping (`hpc_job`)
// and Kubernetes pod (`pod`, both exporters).
constexpr const char* kAllocationLabels[] = {"job_id", "hpc_job", "pod"};
constexpr const char* kUtil = "DCGM_FI_DEV_GPU_UTIL";

// The shortest text that reads back as `v` ("5", "12.5").
std::string Number(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

// A PromQL string literal: double quotes, with backslash escapes (Go syntax).
std::string PromString(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\x";
          out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xf];
          out += kHex[static_cast<unsigned char>(c) & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// A YAML single-quoted scalar: the only escape is '' for '. Control characters
// (only in options Validate rejects) become '?' so the scalar stays on its line.
std::string YamlQuote(std::string_view s) {
  std::string out = "'";
  for (const char c : s) {
    const bool control = static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
    out += control ? '?' : c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

// A word for the header comment's example command line: bare when it is plain,
// else single-quoted for a POSIX shell; control characters become '?' so a
// comment line can never be broken.
std::string ShellWord(std::string_view s) {
  bool plain = !s.empty();
  std::string safe;
  for (const char c : s) {
    const bool control = static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
    safe += control ? '?' : c;
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.' || c == ':' || c == '/';
    plain = plain && word;
  }
  if (plain) return safe;
  std::string out = "'";
  for (const char c : safe) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `text` as a YAML literal block scalar (`|-`) under a key at `indent` spaces:
// every line taken verbatim, no quoting needed.
std::string Block(const std::string& text, int indent) {
  std::string out = "|-\n";
  const std::string pad(indent + 2, ' ');
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += pad + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

// `(part(label1)) or (part(label2)) or ...` over the allocation labels, where
// part(label) gets the util selector restricted to series with that label set.
template <typename Part>
std::string OverAllocatedGpus(const Part& part) {
  std::string out;
  for (const char* label : kAllocationLabels) {
    const std::string selector = std::string(kUtil) + "{" + label + "!=\"\"}";
    if (!out.empty()) out += "\nor\n";
    out += "(\n" + part(selector) + "\n)";
  }
  return out;
}

// Job and owner (Slurm user or Kubernetes namespace) as alert text, whichever
// exporter the series came from.
constexpr const char* kJobText = "{{ or $labels.job_id $labels.hpc_job $labels.pod \"?\" }}";
constexpr const char* kOwnerText =
    "{{ if $labels.user }}user {{ $labels.user }}{{ else if $labels.namespace }}namespace "
    "{{ $labels.namespace }}{{ else }}user unknown{{ end }}";

struct Alert {
  std::string name;
  std::string expr;
  std::string for_duration;  // "" = none
  std::string severity;
  std::string summary;
  std::string description;
  std::string runbook;
};

std::vector<Alert> Alerts(const RuleOptions& o) {
  std::vector<Alert> alerts;
  const std::string gpu_text = "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}";
  const std::string job_text = std::string("job ") + kJobText + " (" + kOwnerText + ")";

  Alert idle;
  idle.name = "SaturateIdleAllocatedGPU";
  // The offset term: the series already existed a whole window ago, so a job
  // that has just started (and is still loading) does not count as idle.
  idle.expr = OverAllocatedGpus([&](const std::string& sel) {
    return "  max_over_time(" + sel + "[" + o.idle_for + "]) < " + Number(o.idle_below_pct) +
           "\n  and " + sel + " offset " + o.idle_for;
  });
  idle.severity = "warning";
  idle.summary = "Idle allocated " + gpu_text + ", " + job_text;
  idle.description =
      gpu_text + " ({{ $labels.modelName }}) is allocated to " + job_text +
      " but its utilization stayed under " + Number(o.idle_below_pct) + "% for " + o.idle_for +
      " (peak {{ printf \"%.0f\" $value }}%). Release the GPU, or find out why the job does "
      "not use it.";
  idle.runbook =
      "`saturate fleet --prometheus URL --since 24h` ranks idle GPU-hours by job and user; "
      "`saturate watch --pid PID` on the node shows what the job is doing.";
  alerts.push_back(idle);

  Alert saw;
  saw.name = "SaturateSawtoothGPU";
  saw.expr = OverAllocatedGpus([&](const std::string& sel) {
    const std::string range = "[" + o.sawtooth_window + "]";
    return "  stddev_over_time(" + sel + range + ") > " + Number(o.sawtooth_stddev_pct) +
           "\n  and avg_over_time(" + sel + range + ") > " + Number(o.sawtooth_min_mean_pct);
  });
  // Held for a whole window: one idle -> busy step (a job warming up) swings the
  // deviation up for less than a window; a saw-tooth keeps it up.
  saw.for_duration = o.sawtooth_window;
  saw.severity = "info";
  saw.summary = "Saw-tooth utilization on " + gpu_text + ", " + job_text;
  saw.description = "Utilization of " + gpu_text +
                    " alternates between idle and busy: standard deviation "
                    "{{ printf \"%.0f\" $value }} points over " +
                    o.sawtooth_window + " (above " + Number(o.sawtooth_stddev_pct) +
                    ") with a mean above " + Number(o.sawtooth_min_mean_pct) + "%. The " +
                    job_text + " is likely input-bound: the GPU waits for data between steps.";
  saw.runbook =
      "Run the job (or a short copy of it) under `saturate doctor -- CMD`: it names the stage "
      "that starves the GPU and the number to change.";
  alerts.push_back(saw);

  Alert stall;
  stall.name = "SaturateStalledJob";
  stall.expr = "saturate_job_steps_total > 0\nand increase(saturate_job_steps_total[" +
               o.stall_for +
               "]) == 0\nand on(Hostname, job_id) saturate_process_tree_processes > 0";
  stall.severity = "critical";
  stall.summary = "Stalled " + job_text + " on {{ $labels.Hostname }}";
  stall.description =
      "The " + job_text + " on {{ $labels.Hostname }} marked no training step for " + o.stall_for +
      " (stuck at step {{ printf \"%.0f\" $value }}) while its processes are "
      "still alive: a hang (collective, deadlock, storage) or an endless evaluation.";
  stall.runbook =
      "`saturate watch --pid PID` on the node shows whether the processes still use CPU or "
      "GPU; `saturate fleet --prometheus URL` lists the job with its GPUs.";
  alerts.push_back(stall);

  Alert down;
  down.name = "SaturateExporterDown";
  down.expr = "up{job=" + PromString(o.scrape_job) + "} == 0";
  down.for_duration = o.down_for;
  down.severity = "warning";
  down.summary = "saturate exporter {{ $labels.instance }} is down";
  down.description =
      "Prometheus could not scrape {{ $labels.instance }} (scrape job {{ $labels.job }}) for " +
      o.down_for +
      ": its GPUs drop out of the fleet view and its alerts. The job it watched may have "
      "ended, or `saturate watch --prometheus` is not running or not reachable.";
  down.runbook =
      "Check the node: is `saturate watch --prometheus PORT` running and listening on an "
      "address Prometheus reaches; `saturate fleet` reports which nodes are missing.";
  alerts.push_back(down);
  return alerts;
}

bool IsFinite(double v) { return std::isfinite(v); }

Status CheckDuration(const char* flag, const std::string& text) {
  const Result<long long> ms = ParsePromDurationMs(text);
  if (!ms.ok()) return Status::InvalidArgument(std::string(flag) + ": " + ms.status().message());
  if (*ms <= 0) {
    return Status::InvalidArgument(std::string(flag) + ": " + PromString(text) +
                                   " must be longer than 0");
  }
  return Status::OK();
}

}  // namespace

Result<long long> ParsePromDurationMs(const std::string& text) {
  const Status bad = Status::InvalidArgument(
      PromString(text) +
      " is not a PromQL duration (like 30s, 5m, 1h30m: units y w d h m s ms, "
      "largest first, each at most once)");
  struct Unit {
    std::string_view name;
    long long ms;
  };
  // Largest first; "ms" before "m" so that the longer suffix wins.
  static constexpr Unit kUnits[] = {
      {"y", 365LL * 24 * 3600 * 1000},
      {"w", 7LL * 24 * 3600 * 1000},
      {"d", 24LL * 3600 * 1000},
      {"h", 3600LL * 1000},
      {"ms", 1},
      {"m", 60LL * 1000},
      {"s", 1000},
  };
  // Rank in PromQL's order y w d h m s ms (kUnits lists ms early only for matching).
  auto rank = [](std::string_view u) {
    static constexpr std::string_view kOrder[] = {"y", "w", "d", "h", "m", "s", "ms"};
    for (int i = 0; i < 7; ++i) {
      if (kOrder[i] == u) return i;
    }
    return -1;
  };
  if (text.empty()) return bad;
  long long total = 0;
  int last_rank = -1;
  size_t i = 0;
  while (i < text.size()) {
    const size_t digits_start = i;
    long long n = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (__builtin_mul_overflow(n, 10LL, &n) || __builtin_add_overflow(n, text[i] - '0', &n)) {
        return bad;
      }
      ++i;
    }
    if (i == digits_start) return bad;
    const Unit* unit = nullptr;
    for (const Unit& u : kUnits) {
      if (std::string_view(text).substr(i, u.name.size()) == u.name) {
        unit = &u;
        break;
      }
    }
    if (unit == nullptr) return bad;
    const int r = rank(unit->name);
    if (r <= last_rank) return bad;
    last_rank = r;
    i += unit->name.size();
    long long part = 0;
    if (__builtin_mul_overflow(n, unit->ms, &part) || __builtin_add_overflow(total, part, &total)) {
      return bad;
    }
  }
  return total;
}

Status Validate(const RuleOptions& o) {
  if (o.scrape_job.empty()) {
    return Status::InvalidArgument(
        "--scrape-job: empty; give the job_name of the scrape config that scrapes the saturate "
        "exporters (saturate in docs/alerts.md)");
  }
  for (const char c : o.scrape_job) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("--scrape-job: " + PromString(o.scrape_job) +
                                     " holds a control character");
    }
  }
  if (!IsFinite(o.idle_below_pct) || o.idle_below_pct <= 0 || o.idle_below_pct > 100) {
    return Status::InvalidArgument("--idle-below: " + Number(o.idle_below_pct) +
                                   " is not a utilization percent in (0, 100]");
  }
  SATURATE_RETURN_IF_ERROR(CheckDuration("--idle-for", o.idle_for));
  SATURATE_RETURN_IF_ERROR(CheckDuration("--sawtooth-window", o.sawtooth_window));
  if (!IsFinite(o.sawtooth_stddev_pct) || o.sawtooth_stddev_pct <= 0 ||
      o.sawtooth_stddev_pct >= 50) {
    return Status::InvalidArgument(
        "--sawtooth-stddev: " + Number(o.sawtooth_stddev_pct) +
        " is not in (0, 50): utilization in [0, 100] has a standard deviation of at most 50 "
        "(half the time 0, half 100)");
  }
  if (!IsFinite(o.sawtooth_min_mean_pct) || o.sawtooth_min_mean_pct < 0 ||
      o.sawtooth_min_mean_pct >= 100) {
    return Status::InvalidArgument("--sawtooth-min-mean: " + Number(o.sawtooth_min_mean_pct) +
                                   " is not a utilization percent in [0, 100)");
  }
  SATURATE_RETURN_IF_ERROR(CheckDuration("--stall-for", o.stall_for));
  SATURATE_RETURN_IF_ERROR(CheckDuration("--down-for", o.down_for));
  return Status::OK();
}

std::string AlertRulesYaml(const RuleOptions& o) {
  std::string out;
  out += "# Prometheus alerting rules for GPUs watched by saturate (and dcgm-exporter).\n";
  out += "# Generated by `saturate fleet rules` (src/fleet/rules.cc); change the options, not\n";
  out += "# this file. These are the rules of:\n";
  out += "#   saturate fleet rules --scrape-job " + ShellWord(o.scrape_job) + " --idle-below " +
         Number(o.idle_below_pct) + " --idle-for " + ShellWord(o.idle_for) + " \\\n";
  out += "#     --sawtooth-window " + ShellWord(o.sawtooth_window) + " --sawtooth-stddev " +
         Number(o.sawtooth_stddev_pct) + " --sawtooth-min-mean " + Number(o.sawtooth_min_mean_pct) +
         " \\\n";
  out +=
      "#     --stall-for " + ShellWord(o.stall_for) + " --down-for " + ShellWord(o.down_for) + "\n";
  out += "# Load it with `rule_files:` in prometheus.yml; docs/alerts.md explains each alert.\n";
  out += "groups:\n";
  out += "  - name: saturate\n";
  out += "    rules:\n";
  for (const Alert& a : Alerts(o)) {
    out += "      - alert: " + a.name + "\n";
    out += "        expr: " + Block(a.expr, 8);
    if (!a.for_duration.empty()) out += "        for: " + YamlQuote(a.for_duration) + "\n";
    out += "        labels:\n";
    out += "          severity: " + YamlQuote(a.severity) + "\n";
    out += "        annotations:\n";
    out += "          summary: " + YamlQuote(a.summary) + "\n";
    out += "          description: " + YamlQuote(a.description) + "\n";
    out += "          runbook: " + YamlQuote(a.runbook) + "\n";
  }
  return out;
}

}  // namespace saturate::fleet
