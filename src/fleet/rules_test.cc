#include "fleet/rules.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/testing.h"

namespace saturate::fleet {
namespace {

using ::saturate::testing::HasError;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int CountOf(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(RulesTest, DefaultsAreValid) { SATURATE_EXPECT_OK(Validate(RuleOptions{})); }

TEST(RulesTest, StructureOfTheFile) {
  const std::string yaml = AlertRulesYaml(RuleOptions{});
  ASSERT_FALSE(yaml.empty());
  EXPECT_EQ(yaml.back(), '\n');
  const std::vector<std::string> lines = Lines(yaml);
  // Comments first, then exactly one group named saturate.
  size_t first = 0;
  while (first < lines.size() && lines[first].rfind("#", 0) == 0) ++first;
  ASSERT_LT(first + 2, lines.size());
  EXPECT_EQ(lines[first], "groups:");
  EXPECT_EQ(lines[first + 1], "  - name: saturate");
  EXPECT_EQ(lines[first + 2], "    rules:");
  EXPECT_EQ(CountOf(yaml, "  - name: "), 1);
  for (const char* alert : {"SaturateIdleAllocatedGPU", "SaturateSawtoothGPU", "SaturateStalledJob",
                            "SaturateExporterDown"}) {
    EXPECT_EQ(CountOf(yaml, std::string("      - alert: ") + alert + "\n"), 1) << alert;
  }
  EXPECT_EQ(CountOf(yaml, "      - alert: "), 4);
  EXPECT_EQ(CountOf(yaml, "        expr: |-\n"), 4);
  EXPECT_EQ(CountOf(yaml, "        labels:\n          severity: '"), 4);
  EXPECT_EQ(CountOf(yaml, "        annotations:\n          summary: '"), 4);
  EXPECT_EQ(CountOf(yaml, "\n          description: '"), 4);
  EXPECT_EQ(CountOf(yaml, "\n          runbook: '"), 4);
  // Block style only: two-space indentation steps, no tabs, no trailing blanks.
  for (const std::string& line : lines) {
    EXPECT_EQ(line.find('\t'), std::string::npos) << line;
    if (line.empty() || line[0] == '#') continue;
    EXPECT_NE(line.back(), ' ') << line;
    const size_t indent = line.find_first_not_of(' ');
    EXPECT_EQ(indent % 2, 0u) << line;
  }
  // Annotations name the GPU, the job and the user, and point at saturate's tools.
  EXPECT_TRUE(Contains(yaml, "{{ $labels.Hostname }}"));
  EXPECT_TRUE(Contains(yaml, "{{ $labels.gpu }}"));
  EXPECT_TRUE(Contains(yaml, "$labels.job_id"));
  EXPECT_TRUE(Contains(yaml, "$labels.user"));
  EXPECT_TRUE(Contains(yaml, "$value"));
  EXPECT_TRUE(Contains(yaml, "saturate fleet"));
  EXPECT_TRUE(Contains(yaml, "saturate doctor"));
}

TEST(RulesTest, DefaultExpressions) {
  const std::string yaml = AlertRulesYaml(RuleOptions{});
  // Idle: one branch per allocation label, each held to a series a window old.
  for (const char* label : {"job_id", "hpc_job", "pod"}) {
    const std::string sel = std::string("DCGM_FI_DEV_GPU_UTIL{") + label + "!=\"\"}";
    EXPECT_TRUE(Contains(yaml, "max_over_time(" + sel + "[30m]) < 5\n")) << label;
    EXPECT_TRUE(Contains(yaml, "and " + sel + " offset 30m\n")) << label;
    EXPECT_TRUE(Contains(yaml, "stddev_over_time(" + sel + "[10m]) > 25\n")) << label;
    EXPECT_TRUE(Contains(yaml, "and avg_over_time(" + sel + "[10m]) > 10\n")) << label;
  }
  EXPECT_EQ(CountOf(yaml, "\n          or\n"), 4);  // three branches, two alerts
  EXPECT_TRUE(Contains(yaml,
                       "          saturate_job_steps_total > 0\n"
                       "          and increase(saturate_job_steps_total[15m]) == 0\n"
                       "          and on(Hostname, job_id) saturate_process_tree_processes > 0\n"));
  EXPECT_TRUE(Contains(yaml, "          up{job=\"saturate\"} == 0\n        for: '5m'\n"));
  EXPECT_TRUE(Contains(yaml, "        for: '10m'\n"));  // saw-tooth held a window
  EXPECT_EQ(CountOf(yaml, "        for: "), 2);
}

TEST(RulesTest, OptionsReachTheExpressions) {
  RuleOptions o;
  o.scrape_job = "gpu-nodes";
  o.idle_below_pct = 2.5;
  o.idle_for = "1h30m";
  o.sawtooth_window = "20m";
  o.sawtooth_stddev_pct = 30;
  o.sawtooth_min_mean_pct = 12.5;
  o.stall_for = "45m";
  o.down_for = "90s";
  SATURATE_ASSERT_OK(Validate(o));
  const std::string yaml = AlertRulesYaml(o);
  EXPECT_EQ(CountOf(yaml, "[1h30m]) < 2.5\n"), 3);
  EXPECT_EQ(CountOf(yaml, " offset 1h30m\n"), 3);
  EXPECT_EQ(CountOf(yaml, "[20m]) > 30\n"), 3);
  EXPECT_EQ(CountOf(yaml, "[20m]) > 12.5\n"), 3);
  EXPECT_TRUE(Contains(yaml, "increase(saturate_job_steps_total[45m]) == 0"));
  EXPECT_TRUE(Contains(yaml, "up{job=\"gpu-nodes\"} == 0\n        for: '90s'\n"));
  EXPECT_TRUE(Contains(yaml, "        for: '20m'\n"));
  EXPECT_FALSE(Contains(yaml, "[30m]"));
  EXPECT_FALSE(Contains(yaml, "[10m]"));
  // The header says how to make this file again.
  EXPECT_TRUE(Contains(yaml, "--scrape-job gpu-nodes --idle-below 2.5 --idle-for 1h30m"));
  EXPECT_TRUE(
      Contains(yaml, "--sawtooth-window 20m --sawtooth-stddev 30 --sawtooth-min-mean 12.5"));
  EXPECT_TRUE(Contains(yaml, "--stall-for 45m --down-for 90s\n"));
  // Annotations state the thresholds in use.
  EXPECT_TRUE(Contains(yaml, "under 2.5% for 1h30m"));
}

TEST(RulesTest, ScrapeJobIsQuotedSafely) {
  RuleOptions o;
  o.scrape_job = R"(we"ird\job 'x' {{ $y }})";
  SATURATE_ASSERT_OK(Validate(o));
  const std::string yaml = AlertRulesYaml(o);
  // A PromQL string literal inside a literal block: escapes for PromQL only.
  EXPECT_TRUE(Contains(yaml, R"(          up{job="we\"ird\\job 'x' {{ $y }}"} == 0)")) << yaml;
  // Never inside an annotation, where {{ }} would be template syntax.
  for (const std::string& line : Lines(yaml)) {
    if (Contains(line, "summary:") || Contains(line, "description:")) {
      EXPECT_FALSE(Contains(line, "we\"ird")) << line;
    }
  }
  // The header comment shell-quotes it.
  EXPECT_TRUE(Contains(yaml, R"(--scrape-job 'we"ird\job '\''x'\'' {{ $y }}')")) << yaml;
}

TEST(RulesTest, InvalidOptionsCannotBreakTheYamlStructure) {
  RuleOptions o;
  o.scrape_job = "a\n    - name: injected";
  o.down_for = "5m\nfoo: bar";
  EXPECT_FALSE(Validate(o).ok());
  const std::string yaml = AlertRulesYaml(o);
  // Same lines as the defaults, each at the same indentation: nothing escaped
  // its quoted scalar, block or comment.
  const std::vector<std::string> got = Lines(yaml);
  const std::vector<std::string> want = Lines(AlertRulesYaml(RuleOptions{}));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].find_first_not_of(' '), want[i].find_first_not_of(' ')) << got[i];
    EXPECT_EQ(got[i][0] == '#', want[i][0] == '#') << got[i];
  }
  EXPECT_TRUE(Contains(yaml, R"(up{job="a\n    - name: injected"} == 0)")) << yaml;
  EXPECT_TRUE(Contains(yaml, "for: '5m?foo: bar'")) << yaml;
}

TEST(RulesTest, ValidateNamesTheFlag) {
  struct Case {
    void (*set)(RuleOptions&);
    const char* flag;
    const char* words;
  };
  const Case cases[] = {
      {[](RuleOptions& o) { o.scrape_job = ""; }, "--scrape-job", "empty"},
      {[](RuleOptions& o) { o.scrape_job = "a\tb"; }, "--scrape-job", "control character"},
      {[](RuleOptions& o) { o.idle_below_pct = -1; }, "--idle-below", "-1"},
      {[](RuleOptions& o) { o.idle_below_pct = 0; }, "--idle-below", "(0, 100]"},
      {[](RuleOptions& o) { o.idle_below_pct = 101; }, "--idle-below", "101"},
      {[](RuleOptions& o) { o.idle_below_pct = std::nan(""); }, "--idle-below", "percent"},
      {[](RuleOptions& o) { o.idle_for = "30x"; }, "--idle-for",
       "\"30x\" is not a PromQL duration"},
      {[](RuleOptions& o) { o.idle_for = ""; }, "--idle-for", "not a PromQL duration"},
      {[](RuleOptions& o) { o.idle_for = "0m"; }, "--idle-for", "longer than 0"},
      {[](RuleOptions& o) { o.sawtooth_window = "-5m"; }, "--sawtooth-window", "not a PromQL"},
      {[](RuleOptions& o) { o.sawtooth_window = "1.5h"; }, "--sawtooth-window", "not a PromQL"},
      {[](RuleOptions& o) { o.sawtooth_stddev_pct = -1; }, "--sawtooth-stddev", "(0, 50)"},
      {[](RuleOptions& o) { o.sawtooth_stddev_pct = 50; }, "--sawtooth-stddev", "at most 50"},
      {[](RuleOptions& o) { o.sawtooth_min_mean_pct = -0.5; }, "--sawtooth-min-mean", "-0.5"},
      {[](RuleOptions& o) { o.sawtooth_min_mean_pct = 100; }, "--sawtooth-min-mean", "[0, 100)"},
      {[](RuleOptions& o) { o.stall_for = "15"; }, "--stall-for", "not a PromQL duration"},
      {[](RuleOptions& o) { o.stall_for = "5m1h"; }, "--stall-for", "largest first"},
      {[](RuleOptions& o) { o.down_for = "5 m"; }, "--down-for", "not a PromQL duration"},
      {[](RuleOptions& o) { o.down_for = "0s"; }, "--down-for", "longer than 0"},
  };
  for (const Case& c : cases) {
    RuleOptions o;
    c.set(o);
    const Status s = Validate(o);
    EXPECT_TRUE(HasError(s, StatusCode::kInvalidArgument, {c.flag, c.words})) << c.flag;
    EXPECT_EQ(s.message().rfind(std::string(c.flag) + ": ", 0), 0u) << s.message();
  }
}

TEST(RulesTest, PromDurations) {
  struct Case {
    const char* text;
    long long ms;
  };
  const Case good[] = {
      {"30s", 30000},         {"5m", 300000},           {"1h30m", 5400000},
      {"500ms", 500},         {"1m5s250ms", 65250},     {"2d", 2 * 86400000LL},
      {"1w", 7 * 86400000LL}, {"1y", 365 * 86400000LL}, {"0s", 0},
  };
  for (const Case& c : good) {
    const Result<long long> ms = ParsePromDurationMs(c.text);
    ASSERT_TRUE(ms.ok()) << c.text << ": " << ms.status().ToString();
    EXPECT_EQ(*ms, c.ms) << c.text;
  }
  for (const char* bad : {"", "m", "5", "5M", "5m5m", "5s1m", "1.5h", "-1m", " 5m", "5m ", "5mm",
                          "99999999999999999999s", "9999999999999999y"}) {
    EXPECT_FALSE(ParsePromDurationMs(bad).ok()) << bad;
  }
}

// deploy/prometheus/saturate-rules.yml is the default output, byte for byte.
// SATURATE_WRITE_SHIPPED_RULES=1 rewrites it (after a deliberate change here).
TEST(RulesTest, ShippedFileIsTheDefaultOutput) {
  const std::string want = AlertRulesYaml(RuleOptions{});
  const std::string path = SATURATE_SHIPPED_RULES;
  if (const char* w = std::getenv("SATURATE_WRITE_SHIPPED_RULES"); w && std::string(w) == "1") {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << want;
  }
  const std::string have = ::saturate::testing::ReadFileOrFail(path);
  EXPECT_TRUE(have == want)
      << path << " differs from AlertRulesYaml(RuleOptions{}); after changing the rules, run "
      << "SATURATE_WRITE_SHIPPED_RULES=1 fleet_rules_test --gtest_filter=*Shipped* "
      << "(or `saturate fleet rules > " << path << "`) and commit the file";
}

}  // namespace
}  // namespace saturate::fleet
