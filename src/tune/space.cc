#include "tune/space.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

namespace saturate::tune {
namespace {

// A range may not expand into more values than this: a typo such as
// 1..100000 should fail, not start a week of trials.
constexpr size_t kMaxValues = 64;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<double> ParseNumber(std::string_view s) {
  if (s.empty()) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Numbers as a person writes them: 64, not 64.000000.
std::string NumberText(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%g", v);
  }
  return buf;
}

Status Bad(std::string_view text, const std::string& why) {
  return Status::InvalidArgument("--param '" + std::string(text) + "': " + why);
}

bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// "a..b[:xk|:+k]" -> its values, ascending.
Result<std::vector<std::string>> ExpandRange(std::string_view text, std::string_view spec) {
  const size_t dots = spec.find("..");
  std::string_view to_step = spec.substr(dots + 2);
  std::string_view step_text;
  if (const size_t colon = to_step.find(':'); colon != std::string_view::npos) {
    step_text = to_step.substr(colon + 1);
    to_step = to_step.substr(0, colon);
  }
  const std::optional<double> from = ParseNumber(spec.substr(0, dots));
  const std::optional<double> to = ParseNumber(to_step);
  if (!from || !to) return Bad(text, "a range needs numbers at both ends, e.g. 32..1024:x2");
  if (*to < *from) return Bad(text, "the range ends below its start");
  bool geometric = false;
  double step = 1;
  if (!step_text.empty()) {
    const std::optional<double> k = ParseNumber(step_text.substr(1));
    if (step_text[0] == 'x' || step_text[0] == '*') {
      geometric = true;
    } else if (step_text[0] != '+') {
      return Bad(text, "the step is xK (multiply) or +K (add), e.g. :x2 or :+4");
    }
    if (!k) return Bad(text, "the step '" + std::string(step_text) + "' is not a number");
    step = *k;
  }
  if (geometric && (step <= 1 || *from <= 0)) {
    return Bad(text, "a geometric range needs a start above 0 and a factor above 1");
  }
  if (!geometric && step <= 0) return Bad(text, "the step must be positive");
  std::vector<std::string> values;
  const double tolerance = 1e-9 * std::max(1.0, std::fabs(*to));
  for (double v = *from; v <= *to + tolerance; v = geometric ? v * step : v + step) {
    if (values.size() == kMaxValues) {
      return Bad(text, "expands to more than " + std::to_string(kMaxValues) + " values");
    }
    values.push_back(NumberText(v));
  }
  return values;
}

}  // namespace

Role RoleOf(std::string_view name) {
  const std::string n = Lower(name);
  static const std::set<std::string> precision = {"amp", "precision", "dtype", "mixed_precision"};
  static const std::set<std::string> batch = {"batch", "batch_size", "bs", "micro_batch",
                                              "micro_batch_size"};
  static const std::set<std::string> threads = {"threads", "workers", "num_workers",
                                                "loader_threads"};
  static const std::set<std::string> prefetch = {"prefetch", "prefetch_factor", "prefetch_depth"};
  if (precision.count(n)) return Role::kPrecision;
  if (batch.count(n)) return Role::kBatch;
  if (threads.count(n)) return Role::kThreads;
  if (prefetch.count(n)) return Role::kPrefetch;
  return Role::kOther;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kPrecision:
      return "precision";
    case Role::kBatch:
      return "batch";
    case Role::kThreads:
      return "threads";
    case Role::kPrefetch:
      return "prefetch";
    case Role::kOther:
      break;
  }
  return "other";
}

Result<Param> ParseParam(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    return Bad(text, "expected NAME=VALUES, e.g. threads=1,2,4 or batch=32..1024:x2");
  }
  Param p;
  p.name = std::string(text.substr(0, eq));
  if (!ValidName(p.name)) {
    return Bad(text, "the name must be letters, digits, '_' or '-'");
  }
  const std::string_view spec = text.substr(eq + 1);
  if (spec.empty()) return Bad(text, "no values after '='");
  if (spec.find("..") != std::string_view::npos) {
    if (spec.find(',') != std::string_view::npos) {
      return Bad(text, "give either a list (a,b,c) or a range (a..b:x2), not both");
    }
    SATURATE_ASSIGN_OR_RETURN(p.values, ExpandRange(text, spec));
  } else {
    size_t start = 0;
    while (true) {
      const size_t comma = spec.find(',', start);
      const std::string_view v = spec.substr(start, comma - start);
      if (v.empty()) return Bad(text, "an empty value in the list");
      p.values.emplace_back(v);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (p.values.size() > kMaxValues) {
      return Bad(text, "more than " + std::to_string(kMaxValues) + " values");
    }
  }
  std::set<std::string> seen;
  for (const std::string& v : p.values) {
    if (!seen.insert(v).second) return Bad(text, "the value '" + v + "' is given twice");
  }
  p.numeric = true;
  for (const std::string& v : p.values) {
    const std::optional<double> n = ParseNumber(v);
    if (!n) {
      p.numeric = false;
      p.numbers.clear();
      break;
    }
    p.numbers.push_back(*n);
  }
  if (p.numeric) {
    // Ascending, so that a failed batch size rules out the larger ones and
    // plots read left to right.
    std::vector<size_t> order(p.values.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return p.numbers[a] < p.numbers[b]; });
    Param sorted = p;
    for (size_t i = 0; i < order.size(); ++i) {
      sorted.values[i] = p.values[order[i]];
      sorted.numbers[i] = p.numbers[order[i]];
    }
    p = std::move(sorted);
  }
  p.role = RoleOf(p.name);
  return p;
}

Result<Space> ParseSpace(const std::vector<std::string>& flags) {
  if (flags.empty()) {
    return Status::InvalidArgument("give at least one --param, e.g. --param threads=1,2,4,8");
  }
  Space space;
  std::set<std::string> names;
  for (const std::string& flag : flags) {
    SATURATE_ASSIGN_OR_RETURN(Param p, ParseParam(flag));
    if (!names.insert(p.name).second) {
      return Status::InvalidArgument("--param '" + flag + "': '" + p.name + "' is given twice");
    }
    space.params.push_back(std::move(p));
  }
  std::stable_sort(space.params.begin(), space.params.end(),
                   [](const Param& a, const Param& b) { return a.role < b.role; });
  return space;
}

size_t Space::Size() const {
  size_t n = params.empty() ? 0 : 1;
  for (const Param& p : params) n *= p.values.size();
  return n;
}

const Param* Space::Find(std::string_view name) const {
  for (const Param& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const Param* Space::FindRole(Role role) const {
  for (const Param& p : params) {
    if (p.role == role) return &p;
  }
  return nullptr;
}

std::vector<Config> Space::Grid() const {
  std::vector<Config> out;
  if (params.empty()) return out;
  std::vector<size_t> index(params.size(), 0);
  while (true) {
    Config c;
    for (size_t i = 0; i < params.size(); ++i) c[params[i].name] = params[i].values[index[i]];
    out.push_back(std::move(c));
    size_t i = params.size();
    while (i > 0) {
      --i;
      if (++index[i] < params[i].values.size()) break;
      index[i] = 0;
      if (i == 0) return out;
    }
  }
}

Result<Config> ParseConfig(const Space& space, const std::vector<std::string>& flags,
                           std::string_view flag_name) {
  Config config;
  for (const std::string& flag : flags) {
    const size_t eq = flag.find('=');
    const std::string name = flag.substr(0, eq);
    if (eq == std::string::npos || eq + 1 == flag.size()) {
      return Status::InvalidArgument(std::string(flag_name) + " '" + flag +
                                     "': expected NAME=VALUE");
    }
    if (space.Find(name) == nullptr) {
      return Status::InvalidArgument(std::string(flag_name) + " '" + flag + "': '" + name +
                                     "' is not a --param");
    }
    config[name] = flag.substr(eq + 1);
  }
  return config;
}

Config FirstConfig(const Space& space, const Config& overrides) {
  Config c;
  for (const Param& p : space.params) {
    const auto it = overrides.find(p.name);
    c[p.name] = it != overrides.end() ? it->second : p.values.front();
  }
  return c;
}

std::string Substitute(std::string_view arg, const Config& config) {
  std::string out;
  size_t i = 0;
  while (i < arg.size()) {
    if (arg[i] == '{') {
      const size_t close = arg.find('}', i + 1);
      if (close != std::string_view::npos) {
        const auto it = config.find(std::string(arg.substr(i + 1, close - i - 1)));
        if (it != config.end()) {
          out += it->second;
          i = close + 1;
          continue;
        }
      }
    }
    out += arg[i++];
  }
  return out;
}

std::string EnvName(std::string_view name) {
  std::string out = "SATURATE_TUNE_";
  for (char c : name) {
    out += std::isalnum(static_cast<unsigned char>(c))
               ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
               : '_';
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> EnvFor(const Config& config) {
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& [name, value] : config) env.emplace_back(EnvName(name), value);
  return env;
}

std::string ConfigText(const Config& config) {
  std::string out;
  for (const auto& [name, value] : config) {
    if (!out.empty()) out += ' ';
    out += name + "=" + value;
  }
  return out;
}

std::optional<double> NumberOf(const Config& config, std::string_view name) {
  const auto it = config.find(std::string(name));
  if (it == config.end()) return std::nullopt;
  return ParseNumber(it->second);
}

}  // namespace saturate::tune
