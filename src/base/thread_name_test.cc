#include "base/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace saturate::base {
namespace {

std::string ThisThreadName() {
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(ThreadNameTest, NamesTheCallingThreadWithThePrefixCutToFifteenBytes) {
  std::string short_name, long_name;
  std::thread([&] {
    NameThisThread("feed-3");
    short_name = ThisThreadName();
    NameThisThread("a-very-long-thread-name");
    long_name = ThisThreadName();
  }).join();
  EXPECT_EQ(short_name, "sat-feed-3");
  EXPECT_EQ(long_name, "sat-a-very-long");
  EXPECT_TRUE(IsSaturateThreadName(short_name));
  EXPECT_TRUE(IsSaturateThreadName(long_name + "\n"));
  EXPECT_FALSE(IsSaturateThreadName("python3"));
  EXPECT_FALSE(IsSaturateThreadName("pt_autograd_0"));
  EXPECT_NE(ThisThreadName(), short_name);  // only the thread that asked was renamed
}

}  // namespace
}  // namespace saturate::base
