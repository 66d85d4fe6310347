#include "saturate/remote/range_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "base/testing.h"

namespace saturate::remote {
namespace {

// An in-memory store that records the ranges asked for (unit tests only;
// the end-to-end tests use a real S3 server).
class MemoryStore : public ObjectStore {
 public:
  MemoryStore() : ObjectStore(ObjectUrl{Scheme::kS3, "bucket", "p", ""}) {}
  std::map<std::string, std::vector<std::byte>> objects;
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // guarded by mu
  int fail_next = 0;

  Result<std::string> Get(std::string_view) override { return Status::Unimplemented("get"); }
  Result<ObjectStat> Stat(std::string_view name) override {
    std::lock_guard<std::mutex> lock(mu);
    return ObjectStat{objects.at(std::string(name)).size(), "v1"};
  }
  Status GetRange(std::string_view name, uint64_t offset, std::span<std::byte> out) override {
    std::lock_guard<std::mutex> lock(mu);
    if (fail_next > 0) {
      --fail_next;
      return Status::IOError("injected");
    }
    auto& o = objects.at(std::string(name));
    if (offset + out.size() > o.size()) return Status::Corruption("short");
    std::copy(o.begin() + offset, o.begin() + offset + out.size(), out.begin());
    ranges.emplace_back(offset, out.size());
    counters_.bytes_fetched += out.size();
    return Status::OK();
  }
  Status Put(std::string_view, std::span<const std::byte>) override { return Status::OK(); }
  Status PutFile(std::string_view, const std::string&) override { return Status::OK(); }
  Status Delete(std::string_view) override { return Status::OK(); }
  Result<std::vector<std::string>> List() override { return std::vector<std::string>{}; }
  uint64_t fetched() {
    std::lock_guard<std::mutex> lock(mu);
    uint64_t n = 0;
    for (auto& r : ranges) n += r.second;
    return n;
  }
};

constexpr uint64_t kRecord = 256;
constexpr uint64_t kRecords = 64;

std::shared_ptr<MemoryStore> MakeStore() {
  auto s = std::make_shared<MemoryStore>();
  std::vector<std::byte> o(kRecord * kRecords);
  for (size_t i = 0; i < o.size(); ++i) o[i] = std::byte(static_cast<uint8_t>(i * 7 + i / 251));
  s->objects["obj"] = o;
  return s;
}

ByteRange Rec(uint64_t i) { return ByteRange{0, i * kRecord, kRecord}; }

void ExpectRecord(const std::shared_ptr<MemoryStore>& s, RangeReader* r, uint64_t i) {
  auto got = r->Read(Rec(i));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got->get()) % 64, 0u);
  const auto& o = s->objects["obj"];
  EXPECT_EQ(std::memcmp(got->get(), o.data() + i * kRecord, kRecord), 0) << "record " << i;
}

RemoteOptions Small() {
  RemoteOptions o;
  o.readahead_bytes = 8 * kRecord;
  o.requests = 3;
  o.block_bytes = 1024;
  o.max_request_bytes = 4096;
  return o;
}

TEST(RangeReader, PlannedSequentialReadsAreCoalescedAndFetchedOnce) {
  auto store = MakeStore();
  SATURATE_ASSERT_OK_AND_ASSIGN(
      auto reader, RangeReader::Open(store, {{"obj", kRecord * kRecords}}, "ds", Small()));
  std::vector<ByteRange> plan;
  for (uint64_t i = 0; i < kRecords; ++i) plan.push_back(Rec(i));
  reader->Plan(plan, true);
  for (uint64_t i = 0; i < kRecords; ++i) ExpectRecord(store, reader.get(), i);
  EXPECT_EQ(store->fetched(), kRecord * kRecords);  // each byte once
  std::lock_guard<std::mutex> lock(store->mu);
  EXPECT_LT(store->ranges.size(), kRecords);  // neighbours shared requests
}

TEST(RangeReader, ShuffledPlanFetchesEachRecordOnceWithoutCache) {
  auto store = MakeStore();
  SATURATE_ASSERT_OK_AND_ASSIGN(
      auto reader, RangeReader::Open(store, {{"obj", kRecord * kRecords}}, "ds", Small()));
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kRecords; ++i) order.push_back((i * 37) % kRecords);
  std::vector<ByteRange> plan;
  for (uint64_t i : order) plan.push_back(Rec(i));
  reader->Plan(plan, true);
  for (uint64_t i : order) ExpectRecord(store, reader.get(), i);
  EXPECT_EQ(store->fetched(), kRecord * kRecords);
  // Unplanned reads still work.
  ExpectRecord(store, reader.get(), 5);
}

TEST(RangeReader, ReadsSlightlyOutOfPlanOrderFetchNothingTwice) {
  auto store = MakeStore();
  SATURATE_ASSERT_OK_AND_ASSIGN(
      auto reader, RangeReader::Open(store, {{"obj", kRecord * kRecords}}, "ds", Small()));
  std::vector<ByteRange> plan;
  for (uint64_t i = 0; i < kRecords; ++i) plan.push_back(Rec((i * 37) % kRecords));
  reader->Plan(plan, true);
  // Two workers: each reads every other chunk of 4, the second one chunk late.
  for (uint64_t c = 0; c < kRecords; c += 8) {
    for (uint64_t k = c + 4; k < std::min(c + 8, kRecords); ++k) {
      ExpectRecord(store, reader.get(), plan[k].offset / kRecord);
    }
    for (uint64_t k = c; k < c + 4; ++k)
      ExpectRecord(store, reader.get(), plan[k].offset / kRecord);
  }
  EXPECT_EQ(store->fetched(), kRecord * kRecords);
}

TEST(RangeReader, CacheServesASecondEpochWithoutFetching) {
  saturate::testing::TempDir dir;
  auto store = MakeStore();
  RemoteOptions o = Small();
  o.cache_dir = dir.path();
  o.cache_bytes = 1 << 20;
  std::vector<ByteRange> plan;
  for (uint64_t i = 0; i < kRecords; ++i) plan.push_back(Rec((i * 37) % kRecords));
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto reader,
                                  RangeReader::Open(store, {{"obj", kRecord * kRecords}}, "ds", o));
    reader->Plan(plan, true);
    for (const ByteRange& r : plan) ExpectRecord(store, reader.get(), r.offset / kRecord);
    EXPECT_EQ(store->fetched(), kRecord * kRecords);  // whole blocks, each once
    EXPECT_EQ(reader->stats().cache_misses, kRecord * kRecords / 1024);
  }
  // A new reader (a restart) over the same directory fetches nothing.
  SATURATE_ASSERT_OK_AND_ASSIGN(auto reader,
                                RangeReader::Open(store, {{"obj", kRecord * kRecords}}, "ds", o));
  reader->Plan(plan, true);
  for (const ByteRange& r : plan) ExpectRecord(store, reader.get(), r.offset / kRecord);
  EXPECT_EQ(store->fetched(), kRecord * kRecords);
  EXPECT_EQ(reader->stats().cache_hits, kRecord * kRecords / 1024);
  // A range reported bad is fetched again.
  reader->Invalidate(Rec(3));
  ExpectRecord(store, reader.get(), 3);
  EXPECT_EQ(store->fetched(), kRecord * kRecords + 1024);
  EXPECT_EQ(reader->stats().cache_checksum_failures, 1u);
}

TEST(RangeReader, FailedFetchIsRetriedByTheReaderAndErrorsSurface) {
  auto store = MakeStore();
  SATURATE_ASSERT_OK_AND_ASSIGN(
      auto reader, RangeReader::Open(store, {{"obj", kRecord * kRecords}}, "ds", Small()));
  store->fail_next = 1;
  std::vector<ByteRange> plan = {Rec(0), Rec(1)};
  reader->Plan(plan, true);
  ExpectRecord(store, reader.get(), 0);
  ExpectRecord(store, reader.get(), 1);
  store->fail_next = 100;
  EXPECT_EQ(reader->Read(Rec(9)).status().code(), StatusCode::kIOError);
  EXPECT_EQ(reader->Read(ByteRange{0, kRecord * kRecords, 1}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace saturate::remote
