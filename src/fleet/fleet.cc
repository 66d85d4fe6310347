#include "fleet/fleet.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <tuple>

#include "fleet/text.h"

namespace saturate::fleet {
namespace {

using text::Clock;
using text::Fmt;

std::string Get(const LabelSet& labels, const char* name) {
  auto it = labels.find(name);
  return it == labels.end() ? "" : it->second;
}

// "45 s", "12 min", "3.5 h".
std::string Span(double seconds) {
  if (seconds < 120) return Fmt("%.0f s", seconds);
  if (seconds < 2 * 3600) return Fmt("%.0f min", seconds / 60);
  return Fmt("%.1f h", seconds / 3600);
}

std::string Plural(int n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string JobName(const std::string& job, const std::string& user) {
  return "job " + job + (user.empty() ? "" : " (" + user + ")");
}

// A holding's series: the key is what tells holdings apart.
using HoldingKey = std::tuple<std::string, std::string, std::string>;  // host, gpu, job

HoldingKey KeyOf(const LabelSet& labels) { return {HostOf(labels), GpuOf(labels), JobOf(labels)}; }

// Series of one holding from several exporters (dcgm-exporter and saturate
// on one node, two scrape jobs): the one with the most samples is kept.
std::map<HoldingKey, const Series*> Dedupe(const std::vector<Series>& all, const char* what,
                                           std::vector<std::string>* gaps) {
  std::map<HoldingKey, std::vector<const Series*>> by_key;
  for (const Series& s : all) by_key[KeyOf(s.labels)].push_back(&s);
  std::map<HoldingKey, const Series*> out;
  for (auto& [key, list] : by_key) {
    std::sort(list.begin(), list.end(),
              [](const Series* a, const Series* b) { return a->points.size() > b->points.size(); });
    out[key] = list.front();
    if (list.size() > 1 && gaps != nullptr) {
      std::string sources;
      for (const Series* s : list) {
        std::string source = Get(s->labels, "instance");
        if (source.empty()) source = Get(s->labels, "job");
        if (source.empty()) source = "?";
        sources += (sources.empty() ? "" : ", ") + source;
      }
      gaps->push_back(std::string(what) + " of GPU " + std::get<1>(key) + " on " +
                      std::get<0>(key) + " comes from " + std::to_string(list.size()) +
                      " series (" + sources + "): counted once");
    }
  }
  return out;
}

void Measure(const Series& s, const FleetOptions& o, double step_s, Holding* h) {
  const std::vector<Point>& p = s.points;
  h->first_s = p.front().t_s;
  h->last_s = p.back().t_s;
  h->hours = double(p.size()) * step_s / 3600;
  double sum = 0;
  for (const Point& q : p) sum += q.value;
  h->mean_util_pct = sum / double(p.size());
  h->busy_hours = sum / 100 * step_s / 3600;
  // Idle runs: consecutive samples below the line, a gap longer than 1.5
  // steps ending the run.
  std::vector<bool> in_idle_run(p.size(), false);
  for (size_t i = 0; i < p.size();) {
    if (p[i].value >= o.idle_below_pct) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < p.size() && p[j].value < o.idle_below_pct &&
           p[j].t_s - p[j - 1].t_s <= 1.5 * step_s) {
      ++j;
    }
    const double run_s = double(j - i) * step_s;
    if (run_s >= o.idle_for_s) {
      h->idle_hours += run_s / 3600;
      std::fill(in_idle_run.begin() + long(i), in_idle_run.begin() + long(j), true);
    }
    i = j;
  }
  // Saw-tooth: over the samples outside idle runs, idle and busy samples
  // that keep flipping.
  int active = 0, idle = 0, busy = 0, flips = 0, last = 0;  // last: -1 idle, +1 busy
  for (size_t i = 0; i < p.size(); ++i) {
    if (in_idle_run[i]) continue;
    ++active;
    int state = 0;
    if (p[i].value < o.sawtooth_idle_pct) state = -1, ++idle;
    if (p[i].value >= o.busy_pct) state = 1, ++busy;
    if (state != 0) {
      if (last != 0 && state != last) ++flips;
      last = state;
    }
  }
  if (active > 0) {
    h->flips_per_sample = double(flips) / active;
    h->sawtooth = active >= 10 && idle >= 0.1 * active && busy >= 0.1 * active &&
                  h->flips_per_sample >= o.sawtooth_min_flips;
    if (h->sawtooth) h->wait_hours = double(idle) * step_s / 3600;
  }
}

void AddMemory(const Series* used, const Series* free_mib, Holding* h) {
  if (used == nullptr) return;
  std::map<double, double> free_at;
  if (free_mib != nullptr) {
    for (const Point& q : free_mib->points) free_at[q.t_s] = q.value;
  }
  for (const Point& q : used->points) {
    h->peak_mem_mib = std::max(h->peak_mem_mib, q.value);
    auto it = free_at.find(q.t_s);
    if (it != free_at.end()) h->total_mem_mib = std::max(h->total_mem_mib, q.value + it->second);
  }
}

void AddTo(Group* g, const Holding& h) {
  g->hours += h.hours;
  g->busy_hours += h.busy_hours;
  g->idle_hours += h.idle_hours;
  g->wait_hours += h.wait_hours;
  if (std::find(g->hosts.begin(), g->hosts.end(), h.host) == g->hosts.end()) {
    g->hosts.push_back(h.host);
  }
}

// Per host: the share of the window's steps with a GPU sample, and where
// the longest stretch without one was.
void Coverage(const FleetInput& in, const FleetOptions& o, std::vector<std::string>* gaps) {
  if (in.end_s <= in.start_s || in.step_s <= 0) return;
  const long steps = long(std::floor((in.end_s - in.start_s) / in.step_s)) + 1;
  std::map<std::string, std::set<long>> seen;
  for (const Series& s : in.util) {
    std::set<long>& slots = seen[HostOf(s.labels)];
    for (const Point& q : s.points) slots.insert(std::lround((q.t_s - in.start_s) / in.step_s));
  }
  for (const auto& [host, slots] : seen) {
    const double share = double(slots.size()) / double(steps);
    if (share >= o.min_coverage) continue;
    long best = 0, best_at = 0, prev = -1;
    for (long slot : slots) {
      if (slot - prev - 1 > best) best = slot - prev - 1, best_at = prev + 1;
      prev = slot;
    }
    if (steps - prev - 1 > best) best = steps - prev - 1, best_at = prev + 1;
    gaps->push_back(host + ": GPU samples for " + Fmt("%.0f", 100 * share) +
                    "% of the window (longest gap " + Span(double(best) * in.step_s) + " from " +
                    Clock(in.start_s + double(best_at) * in.step_s) +
                    " UTC): its GPU-hours are a lower bound");
  }
}

void Downtime(const FleetInput& in, std::vector<std::string>* gaps) {
  for (const Series& s : in.up) {
    int down = 0;
    for (const Point& q : s.points) down += q.value < 0.5;
    if (down == 0) continue;
    gaps->push_back("exporter " + Get(s.labels, "instance") + " (scrape job " +
                    Get(s.labels, "job") + ") was down for " + Span(double(down) * in.step_s) +
                    " of the window");
  }
}

void JobFindings(const Group& job, const std::vector<const Holding*>& held, const FleetOptions& o,
                 std::vector<Finding>* out) {
  const std::string who = JobName(job.name, job.user);
  auto add = [&](const char* kind, double wasted, std::string message, std::string fix) {
    out->push_back(Finding{kind, job.name, job.user, wasted, std::move(message), std::move(fix)});
  };
  if (job.idle_hours > 0) {
    int idle_gpus = 0;
    for (const Holding* h : held) idle_gpus += h->idle_hours > 0;
    add("idle_allocation", job.idle_hours,
        who + " held " + Plural(idle_gpus, "GPU") + " idle (under " + Fmt("%g", o.idle_below_pct) +
            "% for " + Span(o.idle_for_s) + " or more): " + Fmt("%.2f", job.idle_hours) +
            " of its " + Fmt("%.2f", job.hours) + " allocated GPU-h",
        "Release the GPUs while nothing runs on them: end the job or notebook (Slurm: scancel " +
            job.name + "), or allocate only while it computes.");
  }
  if (job.wait_hours > 0) {
    int gpus = 0;
    double flips = 0;
    for (const Holding* h : held) {
      if (!h->sawtooth) continue;
      ++gpus;
      flips = std::max(flips, h->flips_per_sample);
    }
    add("sawtooth", job.wait_hours,
        who + ": utilization flips between idle and busy on " + Plural(gpus, "GPU") + " (" +
            Fmt("%.2f", flips) + " flips per sample; idle " + Fmt("%.2f", job.wait_hours) +
            " GPU-h while running): likely waiting on input every step",
        "Run `saturate doctor -- <the training command>` in the job to name the cause "
        "(input pipeline, host syncs, checkpoints) and the setting to change.");
  }
  if (job.gpus >= 2 && job.used_gpus > 0 && job.used_gpus < job.gpus) {
    add("over_allocation", job.unused_hours,
        who + " holds " + Plural(job.gpus, "GPU") + " and uses " + std::to_string(job.used_gpus) +
            " (mean utilization " + Fmt("%g", o.used_pct) +
            "% or more): " + Fmt("%.2f", job.unused_hours) + " GPU-h unused",
        "Ask for " + Plural(job.used_gpus, "GPU") +
            ", or start one process per GPU (torchrun --nproc_per_node=" +
            std::to_string(job.gpus) + ") so the script uses them all.");
  }
  if (job.peak_mem_pct >= 0 && job.peak_mem_pct < o.headroom_pct && job.used_gpus > 0) {
    add("memory_headroom", 0,
        who + ": GPU memory peaked at " + Fmt("%.0f", job.peak_mem_pct) +
            "% of capacity on every GPU it held",
        "A larger batch fits: `saturate tune` finds the largest that trains faster "
        "(docs/tune.md).");
  }
}

bool MoreWasted(const Group& a, const Group& b) {
  if (a.wasted_hours() != b.wasted_hours()) return a.wasted_hours() > b.wasted_hours();
  if (a.hours != b.hours) return a.hours > b.hours;
  return a.name < b.name;
}

}  // namespace

std::string JobOf(const LabelSet& labels) {
  for (const char* name : {"job_id", "hpc_job"}) {
    std::string v = Get(labels, name);
    if (!v.empty()) return v;
  }
  std::string pod = Get(labels, "pod");
  if (!pod.empty()) {
    std::string ns = Get(labels, "namespace");
    return ns.empty() ? pod : ns + "/" + pod;
  }
  return Get(labels, "run_id");
}

std::string UserOf(const LabelSet& labels) { return Get(labels, "user"); }

std::string HostOf(const LabelSet& labels) {
  std::string host = Get(labels, "Hostname");
  return host.empty() ? Get(labels, "instance") : host;
}

std::string GpuOf(const LabelSet& labels) {
  std::string gpu = Get(labels, "gpu");
  return gpu.empty() ? Get(labels, "UUID") : gpu;
}

FleetReport Analyze(const FleetInput& in, const FleetOptions& o) {
  FleetReport r;
  r.start_s = in.start_s;
  r.end_s = in.end_s;
  r.step_s = in.step_s;
  r.gpu_hour_price = o.gpu_hour_price;
  r.gaps = in.notes;
  const auto util = Dedupe(in.util, "utilization", &r.gaps);
  const auto used = Dedupe(in.mem_used, "memory", nullptr);
  const auto free_mib = Dedupe(in.mem_free, "memory", nullptr);
  for (const auto& [key, series] : util) {
    if (series->points.empty()) continue;
    Holding h;
    std::tie(h.host, h.gpu, h.job) = key;
    h.uuid = Get(series->labels, "UUID");
    h.model = Get(series->labels, "modelName");
    h.user = UserOf(series->labels);
    Measure(*series, o, in.step_s, &h);
    auto u = used.find(key);
    auto f = free_mib.find(key);
    AddMemory(u == used.end() ? nullptr : u->second, f == free_mib.end() ? nullptr : f->second, &h);
    r.holdings.push_back(std::move(h));
  }
  Coverage(in, o, &r.gaps);
  Downtime(in, &r.gaps);

  std::map<std::string, Group> jobs, users, nodes;
  std::map<std::string, std::vector<const Holding*>> held;
  std::map<std::string, std::set<std::string>> node_gpus;
  for (const Holding& h : r.holdings) {
    Group& node = nodes[h.host];
    node.name = h.host;
    node_gpus[h.host].insert(h.gpu);
    if (h.job.empty()) {  // a node's other hours are allocated hours
      node.free_hours += h.hours;
      continue;
    }
    AddTo(&node, h);
    Group& job = jobs[h.job];
    job.name = h.job;
    if (job.user.empty()) job.user = h.user;
    AddTo(&job, h);
    held[h.job].push_back(&h);
  }
  for (auto& [name, g] : nodes) g.gpus = int(node_gpus[name].size());
  for (auto& [name, job] : jobs) {
    std::set<std::string> gpus, used_gpus;
    for (const Holding* h : held[name]) {
      const std::string id = h->host + "/" + h->gpu;
      gpus.insert(id);
      if (h->mean_util_pct >= o.used_pct) used_gpus.insert(id);
      if (h->peak_mem_mib >= 0 && h->total_mem_mib > 0) {
        job.peak_mem_pct = std::max(job.peak_mem_pct, 100 * h->peak_mem_mib / h->total_mem_mib);
      }
    }
    job.gpus = int(gpus.size());
    job.used_gpus = int(used_gpus.size());
    if (job.used_gpus > 0) {
      for (const Holding* h : held[name]) {
        if (!used_gpus.count(h->host + "/" + h->gpu)) {
          job.unused_hours += std::max(0.0, h->hours - h->idle_hours);
        }
      }
    }
    JobFindings(job, held[name], o, &r.findings);
    Group& user = users[job.user.empty() ? "(unknown)" : job.user];
    user.name = job.user.empty() ? "(unknown)" : job.user;
    user.gpus += job.gpus;
    user.used_gpus += job.used_gpus;
    user.hours += job.hours;
    user.busy_hours += job.busy_hours;
    user.idle_hours += job.idle_hours;
    user.wait_hours += job.wait_hours;
    user.unused_hours += job.unused_hours;
    for (const std::string& host : job.hosts) {
      if (std::find(user.hosts.begin(), user.hosts.end(), host) == user.hosts.end()) {
        user.hosts.push_back(host);
      }
    }
  }
  for (auto& [name, g] : jobs) r.jobs.push_back(g);
  for (auto& [name, g] : users) r.users.push_back(g);
  for (auto& [name, g] : nodes) r.nodes.push_back(g);
  std::sort(r.jobs.begin(), r.jobs.end(), MoreWasted);
  std::sort(r.users.begin(), r.users.end(), MoreWasted);
  std::stable_sort(r.findings.begin(), r.findings.end(), [](const Finding& a, const Finding& b) {
    return a.wasted_gpu_hours > b.wasted_gpu_hours;
  });
  return r;
}

}  // namespace saturate::fleet
