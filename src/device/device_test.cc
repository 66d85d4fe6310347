#include "saturate/device/device.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#ifdef SATURATE_WITH_CUDA
#include "device/cuda/nvjpeg_decoder.h"
#endif

namespace saturate::device {
namespace {

TEST(DeviceTest, ProbeReportsGpusOrSaysWhyNot) {
  DeviceReport r = ProbeDevices();
  EXPECT_GE(r.cpu_cores, 1);
  if (r.gpus.empty()) {
    EXPECT_FALSE(r.no_gpu_reason.empty());
  } else {
    for (const GpuInfo& g : r.gpus) {
      EXPECT_FALSE(g.name.empty());
      EXPECT_GT(g.memory_bytes, 0u);
    }
  }
#ifdef SATURATE_WITH_CUDA
  EXPECT_TRUE(r.built_with_cuda);
#else
  EXPECT_FALSE(r.built_with_cuda);
  EXPECT_NE(r.no_gpu_reason.find("built without CUDA"), std::string::npos);
#endif
}

TEST(DeviceTest, ProbingTwiceIsStable) {
  EXPECT_EQ(ProbeDevices().gpus.size(), ProbeDevices().gpus.size());
}

#ifdef SATURATE_WITH_CUDA
// nvJPEG is optional at run time: where it cannot be loaded, the GPU decode
// is Unavailable and the message names the library.
TEST(NvJpegLoadTest, MissingLibraryIsUnavailableAndNamed) {
  for (const char* name : {"libnvjpeg.so.13", "libnvjpeg.so"}) {
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      dlclose(lib);
      GTEST_SKIP() << name << " is loadable here";
    }
  }
  auto decoder = cuda::OpenNvJpegDecoder(0);
  ASSERT_FALSE(decoder.ok());
  EXPECT_EQ(decoder.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(decoder.status().message().find("libnvjpeg.so.13"), std::string::npos)
      << decoder.status().ToString();
}
#endif

}  // namespace
}  // namespace saturate::device
