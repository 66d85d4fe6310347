#include "doctor/check_fix.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace saturate::doctor {
namespace {

bool IsInteger(std::string_view s) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool Matches(std::string_view text, const std::optional<std::string>& value) {
  return value ? text == *value : IsInteger(text);
}

std::string Integer(double v) { return std::to_string(std::llround(v)); }

// The flag that carries `now` (or, for a factor, any value) in argv; the
// error says which flags were looked for.
Result<FlagValue> Locate(const std::vector<std::string>& argv,
                         const std::set<std::string_view>& flags, const std::string& knob,
                         std::optional<std::string> now) {
  if (std::optional<FlagValue> at = FindFlagValue(argv, flags, now)) return *at;
  std::string names;
  for (std::string_view f : flags) names += (names.empty() ? "" : ", ") + std::string(f);
  return Status::Unimplemented("the command has no flag that passes " + knob +
                               (now ? " " + *now : "") + " (looked for " + names +
                               "); make it a command-line flag to check the fix");
}

}  // namespace

std::optional<FlagValue> FindFlagValue(const std::vector<std::string>& argv,
                                       const std::set<std::string_view>& flags,
                                       std::optional<std::string> value) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (flags.contains(a) && i + 1 < argv.size() && Matches(argv[i + 1], value)) {
      return FlagValue{i + 1, a, argv[i + 1], false};
    }
    const size_t eq = a.find('=');
    if (eq != std::string::npos && flags.contains(std::string_view(a).substr(0, eq)) &&
        Matches(std::string_view(a).substr(eq + 1), value)) {
      return FlagValue{i, a.substr(0, eq + 1), a.substr(eq + 1), false};
    }
    if (a.size() > 2 && a.starts_with("-j") && flags.contains("-j") &&
        Matches(std::string_view(a).substr(2), value)) {
      return FlagValue{i, "-j", a.substr(2), true};
    }
  }
  return std::nullopt;
}

const std::set<std::string_view>& WorkerFlags() {
  static const std::set<std::string_view> flags = {"-j",
                                                   "--workers",
                                                   "--num-workers",
                                                   "--num_workers",
                                                   "--dataloader-num-workers",
                                                   "--dataloader_num_workers",
                                                   "--loader-workers",
                                                   "--data-workers",
                                                   "--n-workers"};
  return flags;
}

const std::set<std::string_view>& BatchFlags() {
  static const std::set<std::string_view> flags = {"-b",
                                                   "--batch-size",
                                                   "--batch_size",
                                                   "--batch",
                                                   "--bs",
                                                   "--per-device-train-batch-size",
                                                   "--per_device_train_batch_size",
                                                   "--micro-batch-size",
                                                   "--micro_batch_size"};
  return flags;
}

const std::set<std::string_view>& PrefetchFlags() {
  static const std::set<std::string_view> flags = {"--prefetch", "--prefetch-factor",
                                                   "--prefetch_factor", "--prefetch-depth"};
  return flags;
}

Result<KnobChange> KnobForFix(const Finding& x, const Features& f,
                              const std::vector<std::string>& argv) {
  if (!x.fix_value) {
    return Status::Unimplemented("the " + x.cause + " finding's fix has no setting to apply");
  }
  const auto& [key, value] = *x.fix_value;
  KnobChange c;
  c.to = Integer(value);
  std::optional<int64_t> now;
  const std::set<std::string_view>* flags = nullptr;
  static const std::set<std::string_view> thread_flags = [] {
    std::set<std::string_view> s = WorkerFlags();
    s.insert({"--threads", "--loader-threads", "--loader_threads"});
    return s;
  }();
  if (key == "num_workers" || key == "threads") {
    c.knob = key;
    flags = key == "threads" ? &thread_flags : &WorkerFlags();
    now = f.loader_threads;
  } else if (key == "prefetch" || key == "prefetch_factor") {
    c.knob = key;
    flags = &PrefetchFlags();
    now = f.loader_prefetch;
  } else if (key == "batch_size" || key == "batch_size_factor") {
    c.knob = "batch_size";
    flags = &BatchFlags();
    now = f.loader_batch_size;
  } else {
    return Status::Unimplemented("the " + x.cause + " finding's fix (" + key +
                                 ") is not a command-line setting");
  }
  const bool factor = key == "batch_size_factor";
  std::optional<std::string> expect;
  if (!factor) {
    if (!now) {
      return Status::Unimplemented("the run did not record the " + c.knob +
                                   " it used, so the flag that sets it cannot be found");
    }
    expect = std::to_string(*now);
  }
  SATURATE_ASSIGN_OR_RETURN(FlagValue at, Locate(argv, *flags, c.knob, expect));
  c.flag = at.flag;
  c.from = at.value;
  if (factor) c.to = Integer(std::stod(at.value) * value);
  if (c.to == c.from) {
    return Status::Unimplemented("the fix keeps " + c.knob + " at " + c.from);
  }
  c.command = argv;
  const std::string placeholder = "{" + c.knob + "}";
  c.command[at.index] = at.attached || at.flag.ends_with("=") ? at.flag + placeholder : placeholder;
  return c;
}

void JudgeCheck(const Prediction& predicted, double measured_speedup, bool reliable_gain,
                FixCheck* check, double tolerance) {
  check->predicted_speedup = predicted.speedup;
  check->measured_speedup = measured_speedup;
  check->reliable_gain = reliable_gain;
  const double want = predicted.speedup - 1, got = measured_speedup - 1;
  const double slack = std::max(tolerance * std::fabs(want), 0.03);
  check->within_tolerance =
      measured_speedup > 0 &&
      (predicted.upper_bound ? got >= (1 - tolerance) * want - 0.03 && got <= want + slack
                             : std::fabs(got - want) <= slack);
  char text[200];
  if (measured_speedup <= 0) {
    std::snprintf(text, sizeof(text), "not measured (predicted %.2fx)", predicted.speedup);
  } else {
    std::snprintf(text, sizeof(text), "measured %.2fx, predicted %s%.2fx: %s%s", measured_speedup,
                  predicted.upper_bound ? "<= " : "", predicted.speedup,
                  check->within_tolerance ? "as predicted" : "off the prediction",
                  reliable_gain ? "" : "; no reliable gain");
  }
  check->verdict = text;
}

std::optional<double> FixedShareFromSpeedup(double k, double speedup) {
  if (!(k > 1) || !std::isfinite(k) || !(speedup > 0)) return std::nullopt;
  return std::clamp(k * (1 / speedup - 1) / (1 - k), 0.0, 1.0);
}

std::vector<Finding> ApplyCheck(std::vector<Finding> findings, size_t index, FixCheck check,
                                double min_time_lost_pct) {
  if (index >= findings.size()) return findings;
  Finding& x = findings[index];
  x.demoted = !check.reliable_gain;
  x.check = std::move(check);
  return RankFindings(std::move(findings), min_time_lost_pct);
}

}  // namespace saturate::doctor
