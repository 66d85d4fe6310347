#include "tune/space.h"

#include <gtest/gtest.h>

#include "base/testing.h"

namespace saturate::tune {
namespace {

using ::saturate::testing::HasError;

TEST(SpaceTest, ListsKeepTheirValuesAndNumbersSortAscending) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Param p, ParseParam("threads=8,1,4,2"));
  EXPECT_EQ(p.name, "threads");
  EXPECT_EQ(p.values, (std::vector<std::string>{"1", "2", "4", "8"}));
  EXPECT_TRUE(p.numeric);
  EXPECT_EQ(p.numbers, (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(p.role, Role::kThreads);
  SATURATE_ASSERT_OK_AND_ASSIGN(Param amp, ParseParam("amp=off,bf16,fp16"));
  EXPECT_FALSE(amp.numeric);
  EXPECT_EQ(amp.values, (std::vector<std::string>{"off", "bf16", "fp16"}));
  EXPECT_EQ(amp.role, Role::kPrecision);
}

TEST(SpaceTest, RangesExpand) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Param geo, ParseParam("batch=32..1024:x2"));
  EXPECT_EQ(geo.values, (std::vector<std::string>{"32", "64", "128", "256", "512", "1024"}));
  EXPECT_EQ(geo.role, Role::kBatch);
  SATURATE_ASSERT_OK_AND_ASSIGN(Param add, ParseParam("prefetch=2..9:+3"));
  EXPECT_EQ(add.values, (std::vector<std::string>{"2", "5", "8"}));
  SATURATE_ASSERT_OK_AND_ASSIGN(Param unit, ParseParam("lr_scale=1..3"));
  EXPECT_EQ(unit.values, (std::vector<std::string>{"1", "2", "3"}));
  SATURATE_ASSERT_OK_AND_ASSIGN(Param frac, ParseParam("x=0.5..2:x2"));
  EXPECT_EQ(frac.values, (std::vector<std::string>{"0.5", "1", "2"}));
}

TEST(SpaceTest, BadFlagsSayWhichAndWhy) {
  for (const char* bad : {"threads", "=1,2", "threads=", "threads=1,,2", "batch=32..", "batch=a..b",
                          "batch=64..32", "batch=1..8:x1", "batch=0..8:x2", "batch=1..8:-1",
                          "batch=1..8:+0", "t=1,1", "t=1..3,4", "bad name=1", "t=1..100000"}) {
    const Status s = ParseParam(bad).status();
    EXPECT_TRUE(HasError(s, StatusCode::kInvalidArgument, {"--param '" + std::string(bad) + "'"}))
        << bad << ": " << s.ToString();
  }
  EXPECT_TRUE(HasError(ParseSpace({"t=1,2", "t=3"}).status(), StatusCode::kInvalidArgument,
                       {"given twice"}));
  EXPECT_TRUE(HasError(ParseSpace({}).status(), StatusCode::kInvalidArgument, {"--param"}));
}

TEST(SpaceTest, SpaceOrdersByRoleAndEnumeratesTheGrid) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Space s,
                                ParseSpace({"seed=1,2", "threads=1,2", "amp=off,bf16", "bs=8,16"}));
  ASSERT_EQ(s.params.size(), 4u);
  EXPECT_EQ(s.params[0].name, "amp");
  EXPECT_EQ(s.params[1].name, "bs");
  EXPECT_EQ(s.params[2].name, "threads");
  EXPECT_EQ(s.params[3].name, "seed");
  EXPECT_EQ(s.Size(), 16u);
  const std::vector<Config> grid = s.Grid();
  ASSERT_EQ(grid.size(), 16u);
  EXPECT_EQ(ConfigText(grid[0]), "amp=off bs=8 seed=1 threads=1");
  EXPECT_EQ(ConfigText(grid[1]), "amp=off bs=8 seed=2 threads=1");  // the last varies fastest
  EXPECT_EQ(ConfigText(grid[15]), "amp=bf16 bs=16 seed=2 threads=2");
  EXPECT_EQ(s.FindRole(Role::kBatch)->name, "bs");
  EXPECT_EQ(s.FindRole(Role::kPrefetch), nullptr);
}

TEST(SpaceTest, StartConfigFromFirstValuesAndOverrides) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Space s, ParseSpace({"threads=1,2,4", "amp=off,bf16"}));
  SATURATE_ASSERT_OK_AND_ASSIGN(Config o, ParseConfig(s, {"threads=4"}, "--baseline"));
  EXPECT_EQ(ConfigText(FirstConfig(s, o)), "amp=off threads=4");
  EXPECT_TRUE(HasError(ParseConfig(s, {"workers=4"}, "--baseline").status(),
                       StatusCode::kInvalidArgument, {"--baseline 'workers=4'", "not a --param"}));
  EXPECT_TRUE(HasError(ParseConfig(s, {"threads"}, "--baseline").status(),
                       StatusCode::kInvalidArgument, {"NAME=VALUE"}));
}

TEST(SpaceTest, SubstitutionReplacesOnlyParameters) {
  const Config c = {{"threads", "4"}, {"amp", "bf16"}};
  EXPECT_EQ(Substitute("--workers={threads}", c), "--workers=4");
  EXPECT_EQ(Substitute("{amp}-{threads}{threads}", c), "bf16-44");
  // Python f-strings and JSON keep their braces.
  EXPECT_EQ(Substitute("print(f'{x}') {\"a\": 1} {threads", c),
            "print(f'{x}') {\"a\": 1} {threads");
  EXPECT_EQ(EnvName("num-workers"), "SATURATE_TUNE_NUM_WORKERS");
  const auto env = EnvFor(c);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0], (std::pair<std::string, std::string>{"SATURATE_TUNE_AMP", "bf16"}));
  EXPECT_EQ(NumberOf(c, "threads"), 4.0);
  EXPECT_FALSE(NumberOf(c, "amp"));
}

}  // namespace
}  // namespace saturate::tune
