#include "watch/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>

namespace saturate::watch {
namespace {

TEST(PrometheusTextTest, FamiliesAndSamples) {
  PrometheusText page;
  page.Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).");
  page.Sample({{"gpu", "0"}, {"modelName", "NVIDIA H100"}}, 97);
  page.Sample({{"gpu", "1"}, {"modelName", "NVIDIA H100"}}, 0.5);
  page.Family("saturate_watch_samples_total", "counter", "Samples taken.");
  page.Sample({}, 12);
  EXPECT_EQ(page.text(),
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",modelName=\"NVIDIA H100\"} 97\n"
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",modelName=\"NVIDIA H100\"} 0.5\n"
            "# HELP saturate_watch_samples_total Samples taken.\n"
            "# TYPE saturate_watch_samples_total counter\n"
            "saturate_watch_samples_total 12\n");
}

TEST(PrometheusTextTest, EscapesLabelValuesAndHelp) {
  PrometheusText page;
  page.Family("m", "gauge", "back\\slash\nnewline \"kept\"");
  page.Sample({{"command", "python -c \"print('a\\\\b')\"\nx"}}, NAN);
  page.Sample({{"k", "v"}}, INFINITY);
  EXPECT_EQ(page.text(),
            "# HELP m back\\\\slash\\nnewline \"kept\"\n"
            "# TYPE m gauge\n"
            "m{command=\"python -c \\\"print('a\\\\\\\\b')\\\"\\nx\"} NaN\n"
            "m{k=\"v\"} +Inf\n");
}

TEST(PrometheusTextTest, ValuesKeepFullPrecision) {
  PrometheusText page;
  page.Family("e", "counter", "energy");
  page.Sample({}, 123456789012345.0);
  EXPECT_NE(page.text().find("e 123456789012345\n"), std::string::npos);
}

}  // namespace
}  // namespace saturate::watch
