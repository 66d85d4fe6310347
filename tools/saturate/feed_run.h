// The --transform flags of `bench feed` and `tune feed` (src/feed/measure.h
// times the loader). Thread-safety: a pure function.
#ifndef SATURATE_TOOLS_FEED_RUN_H_
#define SATURATE_TOOLS_FEED_RUN_H_

#include <string>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/feed/loader.h"

namespace saturate::cli {

// The --transform flags as field options.
Result<std::vector<feed::FieldOptions>> ParseTransforms(const std::vector<std::string>& specs);

}  // namespace saturate::cli

#endif  // SATURATE_TOOLS_FEED_RUN_H_
