// The JPEG decode split from the loader to what users see, without a GPU: a
// DeviceLoader on FakeGpu (whose "GPU decoder" runs the CPU decode) records
// its "loader_decode" counters through the real trace writer; doctor reads
// them back as features and a report line, and saturate watch's path (the
// rank scanner over the spans files, then the Prometheus page) serves them.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/testing.h"
#include "device/testing/fake_gpu.h"
#include "doctor/analysis.h"
#include "doctor/report.h"
#include "doctor/run.h"
#include "feed/testing/datasets.h"
#include "feed/testing/photo_dataset.h"
#include "ranks/rank_scanner.h"
#include "saturate/feed/device_loader.h"
#include "saturate/trace/trace.h"
#include "watch/snapshot.h"

namespace saturate {
namespace {

using saturate::testing::FakeGpu;

constexpr uint64_t kPhotos = 19;

// Batches of 4 in file order, 24x32 crops (feed/testing/datasets.h's setup).
feed::LoaderOptions Options(const std::string& dataset) {
  feed::LoaderOptions o = testing::SmallImageLoaderOptions(dataset, /*seed=*/11, 24, 32);
  o.batch_size = 4;
  o.shuffle = false;
  return o;
}

// One epoch through a DeviceLoader with `decode` while tracing into
// `run_dir`; the loader's stats at the end.
feed::LoaderStats TracedEpoch(const std::string& dataset, const std::string& run_dir,
                              const std::string& decode) {
  EXPECT_TRUE(trace::Start(run_dir).ok());
  auto gpu = std::make_shared<FakeGpu>();
  gpu->set_jpeg_decoder(true);
  auto consumer = gpu->CreateStream();
  EXPECT_TRUE(consumer.ok());
  feed::LoaderStats stats;
  {
    auto loader = feed::DeviceLoader::Open(Options(dataset), /*prefetch=*/2, gpu, decode);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    if (!loader.ok()) return stats;
    (*loader)->set_stream(*consumer);
    while (true) {
      auto next = (*loader)->Next();
      EXPECT_TRUE(next.ok()) << next.status().ToString();
      if (!next.ok() || !next->has_value()) break;
    }
    stats = (*loader)->stats();
  }  // closing writes the last "loader_decode" and "loader" records
  gpu->DestroyStream(*consumer);
  EXPECT_TRUE(trace::Stop().ok());
  return stats;
}

class DecodeSplitEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    SATURATE_ASSERT_OK(saturate::testing::WritePhotoDataset(dataset_.path(), kPhotos));
  }
  saturate::testing::TempDir dataset_;
  saturate::testing::TempDir run_;
};

TEST_F(DecodeSplitEndToEnd, AutoSplitReachesDoctorAndWatch) {
  const feed::LoaderStats stats = TracedEpoch(dataset_.path(), run_.path(), "auto");
  ASSERT_GT(stats.gpu_decoded, 0u);
  ASSERT_LT(stats.gpu_decoded, stats.samples);

  // doctor: the spans files alone (no watch ran).
  auto run = doctor::LoadRunFrom({.meta_dir = "", .spans_dir = run_.path()});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const doctor::Features f = doctor::ComputeFeatures(*run);
  EXPECT_EQ(f.decode_mode, "auto");
  EXPECT_TRUE(f.decode_gpu_decoder);
  EXPECT_EQ(f.decode_gpu_images, int64_t(stats.gpu_decoded));
  // The CPU decoded the rest of the samples the workers had made when the
  // record was written (one image each): the epoch's, and at most the few the
  // workers read ahead before the host loader's last record.
  ASSERT_EQ(run->loaders.size(), 1u);
  EXPECT_GE(f.decode_cpu_images + f.decode_gpu_images, int64_t(kPhotos));
  EXPECT_LE(f.decode_cpu_images + f.decode_gpu_images, run->loaders[0].values.at("samples"));
  ASSERT_TRUE(f.decode_gpu_share.has_value());
  EXPECT_NEAR(*f.decode_gpu_share, stats.gpu_decode_fraction, 0.001);
  EXPECT_GE(*f.decode_gpu_share, 0.05);
  EXPECT_LE(*f.decode_gpu_share, 0.95);
  // auto measured both sides (FakeGpu's decoder is the CPU decode: rates of
  // the same order, whatever they are on this machine).
  ASSERT_TRUE(f.decode_cpu_per_s_per_thread.has_value());
  ASSERT_TRUE(f.decode_gpu_per_s.has_value());
  EXPECT_GT(*f.decode_cpu_per_s_per_thread, 0);
  EXPECT_GT(*f.decode_gpu_per_s, 0);
  doctor::Analysis analysis;
  analysis.features = f;
  const std::string summary = doctor::RenderSummary(*run, analysis);
  EXPECT_NE(summary.find("JPEG decode: auto (nvJPEG); GPU "), std::string::npos) << summary;

  // watch: the rank scanner follows RUN/spans-*.jsonl as rank 0, then the page.
  std::vector<ranks::RankProgress> ranks = ranks::RankScanner(run_.path(), 16 << 20, true).Scan();
  ASSERT_EQ(ranks.size(), 1u);
  const std::map<std::string, int64_t>& c = ranks[0].loader_counters;
  EXPECT_EQ(c.at("gpu_decoded"), int64_t(stats.gpu_decoded));
  EXPECT_EQ(c.at("decode_mode"), 2);
  const std::string page = watch::LoaderPrometheus({{"Hostname", "h"}}, {{0, c}});
  EXPECT_NE(
      page.find("saturate_loader_decoded_images_total{Hostname=\"h\",rank=\"0\",where=\"gpu\"} " +
                std::to_string(stats.gpu_decoded) + "\n"),
      std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_decode_mode{Hostname=\"h\",rank=\"0\",mode=\"auto\"} 1\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("saturate_loader_gpu_decode_ratio{Hostname=\"h\",rank=\"0\"} "),
            std::string::npos)
      << page;
}

// decode="cpu" on a GPU: the record says so, and doctor's input_pipeline fix
// would suggest decode="auto" (decode_split_test covers the rule).
TEST_F(DecodeSplitEndToEnd, CpuDecodeIsRecordedToo) {
  const feed::LoaderStats stats = TracedEpoch(dataset_.path(), run_.path(), "cpu");
  EXPECT_EQ(stats.gpu_decoded, 0u);
  auto run = doctor::LoadRunFrom({.meta_dir = "", .spans_dir = run_.path()});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const doctor::Features f = doctor::ComputeFeatures(*run);
  EXPECT_EQ(f.decode_mode, "cpu");
  EXPECT_FALSE(f.decode_gpu_decoder);
  EXPECT_EQ(f.decode_gpu_images, 0);
  ASSERT_EQ(run->loaders.size(), 1u);
  EXPECT_GE(f.decode_cpu_images, int64_t(kPhotos));
  EXPECT_LE(f.decode_cpu_images, run->loaders[0].values.at("samples"));
  EXPECT_DOUBLE_EQ(f.decode_gpu_share.value_or(-1), 0);
  // One thread's rate from the loader's decode time, as auto measured none.
  ASSERT_TRUE(f.decode_cpu_per_s_per_thread.has_value());
  EXPECT_GT(*f.decode_cpu_per_s_per_thread, 0);
  std::vector<ranks::RankProgress> ranks = ranks::RankScanner(run_.path(), 16 << 20, true).Scan();
  ASSERT_EQ(ranks.size(), 1u);
  const std::string page =
      watch::LoaderPrometheus({{"Hostname", "h"}}, {{0, ranks[0].loader_counters}});
  EXPECT_NE(page.find("saturate_loader_decode_mode{Hostname=\"h\",rank=\"0\",mode=\"cpu\"} 1\n"),
            std::string::npos)
      << page;
  EXPECT_NE(
      page.find(
          "saturate_loader_decoded_images_total{Hostname=\"h\",rank=\"0\",where=\"gpu\"} 0\n"),
      std::string::npos)
      << page;
}

}  // namespace
}  // namespace saturate
