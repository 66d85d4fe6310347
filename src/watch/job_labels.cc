#include "watch/job_labels.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>

namespace saturate::watch {
namespace {

std::string Get(const base::GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  return v ? std::string(v) : std::string();
}

// "0,2-3" (Slurm's GPU index list) -> {0, 2, 3}; empty on anything else.
std::optional<std::vector<int>> ParseIndexList(std::string_view s) {
  std::vector<int> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t end = s.find(',', i);
    if (end == std::string_view::npos) end = s.size();
    std::string item(s.substr(i, end - i));
    size_t dash = item.find('-');
    char* rest = nullptr;
    long lo = std::strtol(item.c_str(), &rest, 10);
    long hi = lo;
    if (rest == item.c_str() || lo < 0) return std::nullopt;
    if (dash != std::string::npos) {
      const char* hi_text = item.c_str() + dash + 1;
      hi = std::strtol(hi_text, &rest, 10);
      if (rest == hi_text || hi < lo || hi - lo > 4096) return std::nullopt;
    }
    if (*rest != '\0') return std::nullopt;
    for (long v = lo; v <= hi; ++v) out.push_back(int(v));
    i = end + 1;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::string LoginName() {
  if (passwd* pw = getpwuid(geteuid())) return pw->pw_name;
  return "";
}

bool ValidLabelName(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

JobLabels JobLabelsFromEnv(const base::GetEnv& getenv) {
  JobLabels job;
  auto add = [&](const char* label, std::string value) {
    if (!value.empty()) job.labels.emplace_back(label, std::move(value));
  };
  add("job_id", Get(getenv, "SLURM_JOB_ID"));
  std::string user = Get(getenv, "SLURM_JOB_USER");
  std::string pod = Get(getenv, "POD_NAME");
  std::string run_id = Get(getenv, "TORCHELASTIC_RUN_ID");
  if (run_id == "none") run_id.clear();  // torchrun's default when no id was given
  const bool in_job = !job.labels.empty() || !pod.empty() || !run_id.empty();
  if (user.empty() && in_job) user = LoginName();
  add("user", std::move(user));
  if (!pod.empty()) add("namespace", Get(getenv, "POD_NAMESPACE"));
  add("pod", std::move(pod));
  add("run_id", std::move(run_id));
  std::string gpus = Get(getenv, "SLURM_STEP_GPUS");
  if (gpus.empty()) gpus = Get(getenv, "SLURM_JOB_GPUS");
  if (!gpus.empty()) job.gpus = ParseIndexList(gpus);
  return job;
}

Result<JobLabels> JobLabelsWithFlags(const base::GetEnv& getenv,
                                     const std::vector<std::string>& flags) {
  JobLabels job = JobLabelsFromEnv(getenv);
  for (const std::string& flag : flags) {
    SATURATE_ASSIGN_OR_RETURN(auto label, ParseLabelFlag(flag));
    job.labels = MergeLabels(std::move(job.labels), {std::move(label)});
  }
  return job;
}

Result<std::pair<std::string, std::string>> ParseLabelFlag(std::string_view flag) {
  static constexpr std::array<std::string_view, 8> kOwn = {
      "gpu", "UUID", "Hostname", "modelName", "device", "pci_bus_id", "cpu", "mode"};
  const size_t eq = flag.find('=');
  if (eq == std::string_view::npos) {
    return Status::InvalidArgument("--label " + std::string(flag) + ": expected key=value");
  }
  std::string key(flag.substr(0, eq));
  std::string value(flag.substr(eq + 1));
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--label " + std::string(flag) + ": " + why);
  };
  if (!ValidLabelName(key)) return bad("'" + key + "' is not a Prometheus label name");
  if (key.rfind("__", 0) == 0) return bad("names starting with __ are Prometheus' own");
  if (key == "job" || key == "instance") {
    return bad("'" + key +
               "' is the scrape target's label in Prometheus (it would arrive as exported_" + key +
               "); use job_id for a job");
  }
  if (std::find(kOwn.begin(), kOwn.end(), key) != kOwn.end()) {
    return bad("'" + key + "' is a label saturate already sets on its series");
  }
  if (value.empty()) return bad("the value is empty");
  return std::make_pair(std::move(key), std::move(value));
}

Labels MergeLabels(Labels labels, const Labels& extra) {
  for (const auto& pair : extra) {
    auto it = std::find_if(labels.begin(), labels.end(),
                           [&](const auto& label) { return label.first == pair.first; });
    if (it != labels.end()) {
      it->second = pair.second;
    } else {
      labels.push_back(pair);
    }
  }
  return labels;
}

bool GpuInJob(const JobLabels& job, int index, int gpu_count) {
  if (!job.gpus || int(job.gpus->size()) == gpu_count) return true;
  return std::find(job.gpus->begin(), job.gpus->end(), index) != job.gpus->end();
}

}  // namespace saturate::watch
