#include "feed/measure.h"

#include <gtest/gtest.h>

#include "base/testing.h"
#include "feed/testing/datasets.h"

namespace saturate::feed {
namespace {

LoaderOptions Images(const std::string& dir) {
  LoaderOptions o;
  o.dataset = dir;
  o.batch_size = 5;
  o.threads = 1;
  o.rank = 0;
  o.world_size = 1;
  FieldOptions image{.field = "image"};
  image.image.height = image.image.width = 16;
  o.fields = {image};
  return o;
}

TEST(MeasureFeedTest, CountsEpochsAndLeavesTheWarmUpUntimed) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(testing::WriteImageDataset(dir.path(), 20));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(Images(dir.path())));
  uint64_t seen = 0;
  SATURATE_ASSERT_OK_AND_ASSIGN(FeedMeasurement m, MeasureFeed(*loader, {.warmup = 2, .epochs = 3},
                                                               [&](const Batch& b, uint64_t n) {
                                                                 EXPECT_EQ(b.size(), 5u);
                                                                 EXPECT_EQ(n, ++seen);
                                                               }));
  EXPECT_EQ(m.batches, 12u);  // 3 epochs of 4 batches
  EXPECT_EQ(m.timed_batches(2), 10u);
  EXPECT_EQ(m.samples, 50u);  // the 10 timed batches only
  EXPECT_GT(m.elapsed_s, 0);
  EXPECT_GT(m.samples_per_s(), 0);
  EXPECT_GE(m.wait_pct(), 0);
  EXPECT_EQ(loader->state().epoch, 2u);  // started at 0, ran three
}

TEST(MeasureFeedTest, StopsAfterItsTime) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(testing::WriteImageDataset(dir.path(), 10));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(Images(dir.path())));
  SATURATE_ASSERT_OK_AND_ASSIGN(FeedMeasurement m,
                                MeasureFeed(*loader, {.warmup = 0, .seconds = 0.2}));
  EXPECT_GT(m.batches, 2u);  // epochs follow one another
  EXPECT_GE(m.elapsed_s, 0.2);
}

}  // namespace
}  // namespace saturate::feed
