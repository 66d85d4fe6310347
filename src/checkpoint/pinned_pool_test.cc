#include "checkpoint/pinned_pool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "base/testing.h"
#include "checkpoint/buffer_pool.h"
#include "device/testing/fake_gpu.h"

namespace saturate::checkpoint {
namespace {

// Plain malloc'd memory that records, at each Free, whether the FakeGpu
// still had the range registered (which would leave a stale registration).
class RecordingAllocator : public HostAllocator {
 public:
  explicit RecordingAllocator(std::shared_ptr<testing::FakeGpu> gpu) : gpu_(std::move(gpu)) {}
  Result<void*> Allocate(size_t bytes) override { return std::malloc(bytes); }
  void Free(void* ptr, size_t) override {
    if (gpu_->registered().count(ptr) != 0) ++freed_while_registered;
    ++frees;
    std::free(ptr);
  }
  int frees = 0;
  int freed_while_registered = 0;

 private:
  std::shared_ptr<testing::FakeGpu> gpu_;
};

struct Fixture {
  std::shared_ptr<testing::FakeGpu> gpu = std::make_shared<testing::FakeGpu>();
  std::shared_ptr<RecordingAllocator> base = std::make_shared<RecordingAllocator>(gpu);
  int opened = 0;
  std::shared_ptr<PinnableAllocator> allocator = std::make_shared<PinnableAllocator>(
      base, [this](int index) -> Result<std::shared_ptr<device::Gpu>> {
        ++opened;
        if (index != 0) return Status::Unavailable("cuda:" + std::to_string(index));
        return std::shared_ptr<device::Gpu>(gpu);
      });
};

TEST(PinnableAllocatorTest, PinsOnceAndUnregistersBeforeFreeing) {
  Fixture f;
  SATURATE_ASSERT_OK_AND_ASSIGN(void* a, f.allocator->Allocate(4096));
  SATURATE_ASSERT_OK_AND_ASSIGN(void* b, f.allocator->Allocate(8192));
  SATURATE_ASSERT_OK(f.allocator->Pin(a, 0));
  SATURATE_ASSERT_OK(f.allocator->Pin(a, 0));  // again: a no-op, not a second registration
  EXPECT_TRUE(f.allocator->pinned(a));
  EXPECT_FALSE(f.allocator->pinned(b));
  EXPECT_EQ(f.gpu->registered(), (std::map<void*, size_t>{{a, 4096}}));
  EXPECT_EQ(f.opened, 1);
  f.allocator->Free(a, 4096);
  f.allocator->Free(b, 8192);
  EXPECT_EQ(f.base->frees, 2);
  EXPECT_EQ(f.base->freed_while_registered, 0);
  EXPECT_TRUE(f.gpu->registered().empty());
}

TEST(PinnableAllocatorTest, RefusesForeignPointersAndReportsNoGpu) {
  Fixture f;
  int x = 0;
  EXPECT_EQ(f.allocator->Pin(&x, 0).code(), StatusCode::kInvalidArgument);
  SATURATE_ASSERT_OK_AND_ASSIGN(void* a, f.allocator->Allocate(4096));
  Status s = f.allocator->Pin(a, 3);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_FALSE(f.allocator->pinned(a));
  f.allocator->Free(a, 4096);
}

// The pool replaces its buffers when a larger state comes, and frees them all
// when it goes: none of them may still be registered when unmapped.
TEST(PinnableAllocatorTest, ThePoolNeverFreesARegisteredBuffer) {
  Fixture f;
  {
    BufferPool pool(f.allocator, 2);
    SATURATE_ASSERT_OK_AND_ASSIGN(HostBuffer small, pool.Acquire(1 << 20));
    SATURATE_ASSERT_OK(f.allocator->Pin(small.data, 0));
    pool.Release(small);
    SATURATE_ASSERT_OK_AND_ASSIGN(HostBuffer large, pool.Acquire(64 << 20));  // drops `small`
    EXPECT_EQ(f.base->frees, 1);
    SATURATE_ASSERT_OK(f.allocator->Pin(large.data, 0));
    pool.Release(large);
  }
  EXPECT_EQ(f.base->frees, 2);
  EXPECT_EQ(f.base->freed_while_registered, 0);
  EXPECT_TRUE(f.gpu->registered().empty());
}

}  // namespace
}  // namespace saturate::checkpoint
