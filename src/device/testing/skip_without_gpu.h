// SKIP_WITHOUT_GPU(): skips the current GoogleTest test, saying why, on a
// machine where device::ProbeDevices() finds no GPU. For the tests labelled
// gpu, which are built everywhere and run where a GPU is lent.
#ifndef SATURATE_DEVICE_TESTING_SKIP_WITHOUT_GPU_H_
#define SATURATE_DEVICE_TESTING_SKIP_WITHOUT_GPU_H_

#include <gtest/gtest.h>

#include "saturate/device/device.h"

#define SKIP_WITHOUT_GPU()                                                       \
  do {                                                                           \
    auto report = ::saturate::device::ProbeDevices();                            \
    if (report.gpus.empty()) GTEST_SKIP() << "no GPU: " << report.no_gpu_reason; \
  } while (0)

#endif  // SATURATE_DEVICE_TESTING_SKIP_WITHOUT_GPU_H_
