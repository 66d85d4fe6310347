#include "tune/report.h"

#include <gtest/gtest.h>

namespace saturate::tune {
namespace {

using nlohmann::json;

json Result() {
  json trial = {{"id", 1},
                {"stage", "grid"},
                {"config", {{"threads", "2"}, {"batch", "64"}}},
                {"budget_fraction", 1.0},
                {"status", "ok"},
                {"throughput", 1234.5},
                {"noise_pct", 1.5},
                {"cpu_cores", 2.0},
                {"rss_peak_bytes", 1 << 30},
                {"best", true}};
  json failed = {{"id", 2},
                 {"stage", "grid"},
                 {"config", {{"threads", "2"}, {"batch", "128"}}},
                 {"budget_fraction", 1.0},
                 {"status", "failed"},
                 {"exit_code", 137},
                 {"output_tail", {"CUDA out of memory <script>alert(1)</script>"}}};
  json slow = trial;
  slow["id"] = 3;
  slow["config"]["threads"] = "1";
  slow["throughput"] = 600.0;
  slow.erase("best");
  return {{"mode", "command"},
          {"command", {"python3", "train.py", "--workers", "{threads}", "<b>"}},
          {"strategy", "grid"},
          {"unit", "samples/s"},
          {"params",
           {{{"name", "batch"}, {"role", "batch"}, {"values", {"64", "128"}}},
            {{"name", "threads"}, {"role", "threads"}, {"values", {"1", "2"}}}}},
          {"trials", {trial, failed, slow}},
          {"best", {{"config", {{"threads", "2"}, {"batch", "64"}}}, {"throughput", 1234.5}}},
          {"recommendation",
           {{"config", {{"threads", "2"}, {"batch", "64"}}},
            {"argv", {"python3", "train.py", "--workers", "2", "it's"}},
            {"env", {{"SATURATE_TUNE_THREADS", "2"}}}}},
          {"verify", {{"verdict", "2.05x (2.00-2.10 over 2 rounds): a reliable gain"}}}};
}

TEST(TuneReportTest, TableMarksTheBestAndSaysWhatToRun) {
  const std::string t = RenderTable(Result());
  EXPECT_NE(t.find("*1"), std::string::npos) << t;
  EXPECT_NE(t.find("samples/s"), std::string::npos);
  EXPECT_NE(t.find("failed (exit 137)"), std::string::npos);
  EXPECT_NE(t.find("run: python3 train.py --workers 2 'it'\\''s'"), std::string::npos) << t;
  EXPECT_NE(t.find("env: SATURATE_TUNE_THREADS=2"), std::string::npos);
  EXPECT_NE(t.find("verify: 2.05x"), std::string::npos);
}

TEST(TuneReportTest, HtmlIsSelfContainedAndEscaped) {
  const std::string html = RenderHtml(Result());
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("id=\"threads\""), std::string::npos);  // throughput against threads
  EXPECT_NE(html.find("id=\"batch\""), std::string::npos);
  EXPECT_NE(html.find("✕ failed"), std::string::npos);  // batch 128 failed
  EXPECT_NE(html.find("SATURATE_TUNE_THREADS=2"), std::string::npos);
}

TEST(TuneReportTest, NoRecommendationIsSaid) {
  json r = Result();
  r.erase("recommendation");
  r.erase("best");
  EXPECT_NE(RenderTable(r).find("no recommendation"), std::string::npos);
  EXPECT_NE(RenderHtml(r).find("No recommendation"), std::string::npos);
}

TEST(TuneReportTest, ShellLineQuotes) {
  EXPECT_EQ(ShellLine({"a", "b c", "", "x=1"}), "a 'b c' '' x=1");
}

}  // namespace
}  // namespace saturate::tune
