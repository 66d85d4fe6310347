// Space: the parameters `saturate tune` varies, parsed from `--param` flags,
// and one point of it (a Config). A parameter has a name and an ordered list
// of values, all strings; numeric ones also keep their numbers so that plots
// and the search can order them.
//
//   --param threads=1,2,4,8        a list
//   --param batch=32..1024:x2      a geometric range: 32, 64, ..., 1024
//   --param prefetch=2..8:+2       an arithmetic range: 2, 4, 6, 8
//   --param prefetch=1..4          step +1
//
// A trial receives its Config twice: `{name}` in the command's arguments is
// replaced by the value, and SATURATE_TUNE_<NAME> is set in its environment.
//
// The role of a parameter comes from its name (amp/precision/dtype,
// batch/batch_size/micro_batch, threads/workers/num_workers, prefetch); the
// search orders the knobs by role because they interact in that order.
//
// Thread-safety: plain values and reentrant functions.
#ifndef SATURATE_TUNE_SPACE_H_
#define SATURATE_TUNE_SPACE_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::tune {

// Ordered as the search visits them: precision decides memory per sample,
// which bounds the batch, which decides how fast the loader must feed.
enum class Role { kPrecision = 0, kBatch = 1, kThreads = 2, kPrefetch = 3, kOther = 4 };

Role RoleOf(std::string_view name);
const char* RoleName(Role role);  // "precision", "batch", ...

struct Param {
  std::string name;
  std::vector<std::string> values;  // numeric ones ascending, others in the order given
  bool numeric = false;             // every value parses as a number
  std::vector<double> numbers;      // when numeric, one per value
  Role role = Role::kOther;
};

// One point of the space: parameter name -> value.
using Config = std::map<std::string, std::string>;

struct Space {
  std::vector<Param> params;  // sorted by role, then in the order given

  size_t Size() const;  // points in the grid (product of the value counts)
  const Param* Find(std::string_view name) const;
  const Param* FindRole(Role role) const;  // the first parameter with `role`
  // Every point, the last parameter varying fastest.
  std::vector<Config> Grid() const;
};

// "NAME=SPEC" as given to --param. Errors say which flag and why.
Result<Param> ParseParam(std::string_view text);

// All --param flags; a name given twice is an error.
Result<Space> ParseSpace(const std::vector<std::string>& flags);

// "NAME=VALUE" flags (e.g. --baseline) over a space: every name must be a
// parameter; values need not be among the parameter's values.
Result<Config> ParseConfig(const Space& space, const std::vector<std::string>& flags,
                           std::string_view flag_name);

// The first value of each parameter, overridden by `overrides`.
Config FirstConfig(const Space& space, const Config& overrides = {});

// `arg` with every `{name}` of a parameter in `config` replaced by its value.
// Other braces are left alone (the command may use them itself).
std::string Substitute(std::string_view arg, const Config& config);

// "SATURATE_TUNE_" + the name upper-cased, characters other than letters and
// digits as '_'.
std::string EnvName(std::string_view name);

// (SATURATE_TUNE_<NAME>, value) for each parameter of `config`.
std::vector<std::pair<std::string, std::string>> EnvFor(const Config& config);

// "amp=bf16 batch=256 threads=4".
std::string ConfigText(const Config& config);

// The numeric value of a parameter in a config, when it parses.
std::optional<double> NumberOf(const Config& config, std::string_view name);

}  // namespace saturate::tune

#endif  // SATURATE_TUNE_SPACE_H_
