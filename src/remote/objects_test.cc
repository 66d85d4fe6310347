#include "saturate/remote/objects.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace saturate::remote {
namespace {

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::unique_ptr<ObjectStore> Store() {
  return NewMemoryStore(ObjectUrl{Scheme::kS3, "bucket", "ckpt", ""});
}

TEST(MemoryStore, PutGetListDelete) {
  auto store = Store();
  ASSERT_TRUE(store->Put("b/x", Bytes("hello")).ok());
  ASSERT_TRUE(store->Put("a", Bytes("1")).ok());
  ASSERT_TRUE(store->Put("b/x", Bytes("world!")).ok());  // replaced whole
  EXPECT_EQ(*store->Get("b/x"), "world!");
  EXPECT_EQ(*store->List(), (std::vector<std::string>{"a", "b/x"}));
  auto stat = store->Stat("b/x");
  ASSERT_TRUE(stat.ok());
  EXPECT_EQ(stat->bytes, 6u);
  ASSERT_TRUE(store->Put("b/x", Bytes("wOrld!")).ok());  // same size, new bytes: a new version
  EXPECT_NE(store->Stat("b/x")->version, stat->version);
  ASSERT_TRUE(store->Delete("a").ok());
  ASSERT_TRUE(store->Delete("a").ok());  // deleting a missing object is not an error
  EXPECT_EQ(store->Stat("a").status().code(), StatusCode::kNotFound);
  auto missing = store->Get("a");
  ASSERT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("s3://bucket/ckpt/a"), std::string::npos);
}

TEST(FetchInto, ParallelPartsReassembleTheObject) {
  auto store = Store();
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + i / 7);
  ASSERT_TRUE(store->Put("obj", Bytes(data)).ok());
  for (int requests : {1, 3, 8}) {
    std::vector<std::byte> out(990);
    ASSERT_TRUE(FetchInto(*store, "obj", 10, out, {.requests = requests, .part_bytes = 64}).ok());
    EXPECT_EQ(std::memcmp(out.data(), data.data() + 10, out.size()), 0) << requests;
  }
  std::vector<std::byte> empty;
  EXPECT_TRUE(FetchInto(*store, "nothing", 0, empty).ok());  // nothing asked, nothing fetched
}

TEST(FetchInto, ShortOrMissingObjectNamesIt) {
  auto store = Store();
  ASSERT_TRUE(store->Put("obj", Bytes("short")).ok());
  std::vector<std::byte> out(64);
  Status s = FetchInto(*store, "obj", 0, out, {.requests = 2, .part_bytes = 16});
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("s3://bucket/ckpt/obj"), std::string::npos);
  EXPECT_EQ(FetchInto(*store, "gone", 0, out).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace saturate::remote
