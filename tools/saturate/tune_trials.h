// What `saturate tune` and `saturate doctor --check-fix` share around tune's
// trials: the line printed as each trial ends, and seconds flags.
// Thread-safety: the callback is called from the tuner's one thread.
#ifndef SATURATE_TOOLS_SATURATE_TUNE_TRIALS_H_
#define SATURATE_TOOLS_SATURATE_TUNE_TRIALS_H_

#include <string>

#include "cli.h"
#include "saturate/base/status.h"
#include "tune/tuner.h"

namespace saturate::cli {

// Prints "saturate NAME: trial 2/~4 start: threads=1 -> 812 samples/s" on
// stderr as each trial ends, above the progress bar.
tune::TrialCallback PrintTrials(const char* name, ProgressBar* bar);

// "--trial-seconds 45" means seconds; "45s", "2min" work too.
Result<int64_t> ParseSeconds(const char* flag, const std::string& text);

}  // namespace saturate::cli

#endif  // SATURATE_TOOLS_SATURATE_TUNE_TRIALS_H_
