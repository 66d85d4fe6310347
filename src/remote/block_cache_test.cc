#include "remote/block_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "base/testing.h"

namespace saturate::remote {
namespace {

std::vector<std::byte> Bytes(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(i * 31 + seed));
  return v;
}

TEST(LruAccounting, EvictsLeastRecentlyUsedToFitTheBudget) {
  LruAccounting lru(100);
  EXPECT_TRUE(lru.Insert("a", 40).empty());
  EXPECT_TRUE(lru.Insert("b", 40).empty());
  lru.Touch("a");  // b is now the oldest
  EXPECT_EQ(lru.Insert("c", 40), std::vector<std::string>{"b"});
  EXPECT_TRUE(lru.Contains("a"));
  EXPECT_EQ(lru.total_bytes(), 80u);
  // A key larger than the whole budget evicts everything, itself last.
  EXPECT_EQ(lru.Insert("huge", 500), (std::vector<std::string>{"a", "c", "huge"}));
  EXPECT_EQ(lru.total_bytes(), 0u);
  EXPECT_TRUE(lru.Insert("d", 10).empty());
  EXPECT_TRUE(lru.Insert("d", 30).empty());  // resize
  EXPECT_EQ(lru.total_bytes(), 30u);
  lru.Erase("d");
  EXPECT_EQ(lru.size(), 0u);
}

TEST(BlockCache, StoresReadsAndSurvivesReopen) {
  saturate::testing::TempDir dir;
  auto data = Bytes(1000, 1);
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto cache, BlockCache::Open(dir.path(), 1 << 20));
    EXPECT_EQ(cache->Read("ds/x.0", 0, std::span<std::byte>(data.data(), 1)).code(),
              StatusCode::kNotFound);
    SATURATE_ASSERT_OK(cache->Insert("ds/x.0", data));
  }
  SATURATE_ASSERT_OK_AND_ASSIGN(auto cache, BlockCache::Open(dir.path(), 1 << 20));
  EXPECT_TRUE(cache->Contains("ds/x.0"));
  std::vector<std::byte> part(100);
  SATURATE_ASSERT_OK(cache->Read("ds/x.0", 500, part));
  EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + 500));
  SATURATE_ASSERT_OK(cache->Read("ds/x.0", 0, part));  // verified now: a plain pread
  EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin()));
}

TEST(BlockCache, NeverServesACorruptBlock) {
  saturate::testing::TempDir dir;
  auto data = Bytes(4096, 2);
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto cache, BlockCache::Open(dir.path(), 1 << 20));
    SATURATE_ASSERT_OK(cache->Insert("ds/x.0", data));
  }
  {
    std::fstream f(dir.Join("ds/x.0"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(BlockCache::kHeaderBytes + 4000);
    f.put('\x7f');
  }
  SATURATE_ASSERT_OK_AND_ASSIGN(auto cache, BlockCache::Open(dir.path(), 1 << 20));
  std::vector<std::byte> part(16);
  EXPECT_TRUE(saturate::testing::HasError(cache->Read("ds/x.0", 0, part), StatusCode::kCorruption,
                                          {"checksum"}));
  EXPECT_FALSE(cache->Contains("ds/x.0"));
  EXPECT_FALSE(std::filesystem::exists(dir.Join("ds/x.0")));
}

TEST(BlockCache, EvictsToTheBudgetAcrossInstances) {
  saturate::testing::TempDir dir;
  const uint64_t block = 1000 + BlockCache::kHeaderBytes;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto a, BlockCache::Open(dir.path(), 3 * block));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto b, BlockCache::Open(dir.path(), 3 * block));  // another rank
  SATURATE_ASSERT_OK(a->Insert("ds/x.0", Bytes(1000, 0)));
  SATURATE_ASSERT_OK(b->Insert("ds/x.1", Bytes(1000, 1)));
  SATURATE_ASSERT_OK(a->Insert("ds/x.2", Bytes(1000, 2)));
  SATURATE_ASSERT_OK(a->Insert("ds/x.3", Bytes(1000, 3)));  // a counts 3: at its budget
  SATURATE_ASSERT_OK(a->Insert("ds/x.4", Bytes(1000, 4)));  // over: the rescan sees b's x.1
  uint64_t files = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (e.is_regular_file() && e.path().filename() != ".lock") ++files;
  }
  EXPECT_EQ(files, 3u);
  EXPECT_FALSE(std::filesystem::exists(dir.Join("ds/x.0")));  // the oldest two went
  EXPECT_FALSE(std::filesystem::exists(dir.Join("ds/x.1")));
  EXPECT_EQ(a->evictions(), 2u);
}

TEST(BlockCache, ReadOnlyDirectoryServesButDoesNotStore) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  saturate::testing::TempDir dir;
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto cache, BlockCache::Open(dir.path(), 1 << 20));
    SATURATE_ASSERT_OK(cache->Insert("ds/x.0", Bytes(100, 0)));
  }
  ::chmod(dir.path().c_str(), 0555);
  ::chmod(dir.Join("ds").c_str(), 0555);
  SATURATE_ASSERT_OK_AND_ASSIGN(auto cache, BlockCache::Open(dir.path(), 1 << 20));
  EXPECT_FALSE(cache->writable());
  std::vector<std::byte> part(10);
  SATURATE_EXPECT_OK(cache->Read("ds/x.0", 0, part));
  EXPECT_FALSE(cache->Insert("ds/x.1", Bytes(100, 1)).ok());
  ::chmod(dir.Join("ds").c_str(), 0755);
  ::chmod(dir.path().c_str(), 0755);
}

}  // namespace
}  // namespace saturate::remote
