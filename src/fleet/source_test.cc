#include "fleet/source.h"

#include <gtest/gtest.h>

namespace saturate::fleet {
namespace {

TEST(SourceTest, ParsesAMatrixWithWarnings) {
  std::vector<std::string> warnings;
  auto series = ParseMatrix(R"({"status":"success","warnings":["partial response"],
    "data":{"resultType":"matrix","result":[
      {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","gpu":"0","Hostname":"a"},
       "values":[[1800000000,"40"],[1800000060,"NaN"],[1800000120.5,"60"]]}]}})",
                            "q", &warnings);
  ASSERT_TRUE(series.ok()) << series.status().message();
  ASSERT_EQ(series->size(), 1u);
  EXPECT_EQ((*series)[0].labels.at("Hostname"), "a");
  ASSERT_EQ((*series)[0].points.size(), 2u);  // NaN left out
  EXPECT_EQ((*series)[0].points[1].t_s, 1800000120.5);
  EXPECT_EQ((*series)[0].points[1].value, 60);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "Prometheus warned about `q`: partial response");
}

TEST(SourceTest, ErrorsNameTheQuery) {
  auto rejected =
      ParseMatrix(R"({"status":"error","errorType":"bad_data","error":"parse error at char 5"})",
                  "up{", nullptr);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().message(),
            "Prometheus rejected `up{`: bad_data: parse error at char 5");
  EXPECT_FALSE(ParseMatrix("<html>", "q", nullptr).ok());
  EXPECT_FALSE(ParseMatrix(R"({"status":"success","data":{"resultType":"vector","result":[]}})",
                           "q", nullptr)
                   .ok());
  EXPECT_FALSE(ParseMatrix(R"({"status":"success","data":{"resultType":"matrix","result":[
      {"metric":{},"values":[["x"]]}]}})",
                           "q", nullptr)
                   .ok());
}

TEST(SourceTest, BadFlagsAndUnreachableServers) {
  SourceOptions o;
  o.url = "prometheus:9090";
  auto r = Fetch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--prometheus prometheus:9090: expected http://host:port"),
            std::string::npos);
  o.url = "ftp://x";
  EXPECT_FALSE(Fetch(o).ok());
  // Nothing listens on port 1 of this host.
  o.url = "http://127.0.0.1:1";
  o.timeout_s = 2;
  r = Fetch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot reach Prometheus at http://127.0.0.1:1"),
            std::string::npos)
      << r.status().message();
  o.since_s = 30 * 86400;
  o.step_s = 15;
  r = Fetch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("11,000 points"), std::string::npos);
}

TEST(SourceTest, StepsAndSelectors) {
  EXPECT_EQ(AutoStep(3600), 15);
  EXPECT_EQ(AutoStep(24 * 3600), 60);
  EXPECT_EQ(Selector("up", ""), "up");
  EXPECT_EQ(Selector("DCGM_FI_DEV_GPU_UTIL", "cluster=\"a\""),
            "DCGM_FI_DEV_GPU_UTIL{cluster=\"a\"}");
}

}  // namespace
}  // namespace saturate::fleet
