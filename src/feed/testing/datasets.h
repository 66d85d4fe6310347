// Small datasets for the loader's tests. Thread-safety: test helpers.
#ifndef SATURATE_FEED_TESTING_DATASETS_H_
#define SATURATE_FEED_TESTING_DATASETS_H_

#include <cstdint>
#include <string>

#include "saturate/base/status.h"
#include "saturate/feed/loader.h"

namespace saturate::testing {

// Records: "image", a small JPEG of a gradient keyed on i (sizes vary with
// i), and "label" = i. Record `cut`, if < n, has its JPEG cut short after the
// scan header: its header (size, components) reads, its pixels do not.
Status WriteImageDataset(const std::string& dir, uint64_t n, uint64_t cut = UINT64_MAX);

// Options for the device-stage tests over `dir`: batches of 8 on 2 threads,
// prefetch 2, one rank, and one "image" field of height x width (uint8 HWC;
// the caller sets the rest of fields[0].image).
feed::LoaderOptions SmallImageLoaderOptions(const std::string& dir, uint64_t seed, int height,
                                            int width);

}  // namespace saturate::testing

#endif  // SATURATE_FEED_TESTING_DATASETS_H_
