// Small datasets for the loader's tests. Thread-safety: test helpers.
#ifndef SATURATE_FEED_TESTING_DATASETS_H_
#define SATURATE_FEED_TESTING_DATASETS_H_

#include <cstdint>
#include <string>

#include "saturate/base/status.h"

namespace saturate::testing {

// Records: "image", a small JPEG of a gradient keyed on i (sizes vary with
// i), and "label" = i.
Status WriteImageDataset(const std::string& dir, uint64_t n);

}  // namespace saturate::testing

#endif  // SATURATE_FEED_TESTING_DATASETS_H_
